#!/usr/bin/env python3
"""Test images and transformers' CLIP pixel values for tests/data/test_images.cpp:

  tests/data/fixtures/images/<name>.png|jpg   images written by PIL (no download), each drawn from a
                                               seeded generator: smooth gradients plus noise, so that a
                                               resampling or colour error shows
  tests/data/fixtures/images/cmyk.jpg          a CMYK JPEG, which the reader refuses
  tests/data/fixtures/images/small/preprocessor_config.json
                                               CLIP's processor settings with shortest_edge 40 and a
                                               32 x 32 crop (the fixture stays small)
  tests/data/fixtures/images/expected.safetensors
      <name>.rgb        U8 [H, W, 3]    the image as transformers' processors see it: PIL's decode, then
                                        transformers' convert_to_rgb (transparency onto white)
      <name>.tv         F32 [3, 32, 32] CLIPImageProcessor (torchvision backend) with the small settings
      <name>.pil        F32 [3, 32, 32] CLIPImageProcessorPil with the small settings
      <first>.tv224     F32 [3, 224, 224] CLIPImageProcessor with its default (OpenAI CLIP) settings
    The metadata records the transformers, torch, torchvision and Pillow versions.

Usage: python3 tools/reference/make_clip_image_fixture.py [--out tests/data/fixtures/images]
"""
import argparse
import os

import numpy as np
import PIL
import torch
import torchvision
import transformers
from PIL import Image
from safetensors.numpy import save_file
from transformers import CLIPImageProcessor
from transformers.image_transforms import convert_to_rgb
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil


def pattern(rng, h, w, channels):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = [127 + 120 * np.sin(xx / (5 + 3 * c) + yy / (7 + 2 * c) + c) for c in range(channels)]
    a = np.stack(planes, -1) + rng.normal(0, 20, size=(h, w, channels))
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def images(rng):
    """name -> (PIL image, file suffix, save kwargs). Sizes: shrinking, growing, odd, tall and wide."""
    out = {}
    out["rgb"] = (Image.fromarray(pattern(rng, 61, 87, 3), "RGB"), "png", {})
    rgba = pattern(rng, 24, 18, 4)
    rgba[..., 3] = np.where(rng.random((24, 18)) < 0.2, 0, rgba[..., 3])  # some fully transparent
    out["rgba"] = (Image.fromarray(rgba, "RGBA"), "png", {})
    out["gray"] = (Image.fromarray(pattern(rng, 50, 33, 1)[..., 0], "L"), "png", {})
    pal = Image.fromarray(pattern(rng, 40, 52, 3), "RGB").quantize(colors=16)
    out["palette"] = (pal, "png", {"transparency": 3})  # palette entry 3 transparent (tRNS)
    out["gray_alpha"] = (Image.fromarray(pattern(rng, 20, 30, 2), "LA"), "png", {})
    out["photo"] = (Image.fromarray(pattern(rng, 181, 257, 3), "RGB"), "jpg", {"quality": 90})  # 4:2:0
    out["photo444"] = (Image.fromarray(pattern(rng, 33, 45, 3), "RGB"), "jpg", {"quality": 95, "subsampling": 0})
    out["progressive"] = (Image.fromarray(pattern(rng, 70, 64, 3), "RGB"), "jpg", {"quality": 80, "progressive": True})
    out["gray_jpeg"] = (Image.fromarray(pattern(rng, 29, 41, 1)[..., 0], "L"), "jpg", {"quality": 85})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/fixtures/images")
    args = ap.parse_args()
    os.makedirs(os.path.join(args.out, "small"), exist_ok=True)
    small = dict(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32})
    tv_small, pil_small = CLIPImageProcessor(**small), CLIPImageProcessorPil(**small)
    tv_small.save_pretrained(os.path.join(args.out, "small"))
    tv_default = CLIPImageProcessor()
    rng = np.random.default_rng(1234)
    tensors = {}
    for i, (name, (img, suffix, kw)) in enumerate(images(rng).items()):
        path = os.path.join(args.out, f"{name}.{suffix}")
        img.save(path, **kw)
        loaded = Image.open(path)
        tensors[f"{name}.rgb"] = np.asarray(convert_to_rgb(loaded, return_numpy=True), dtype=np.uint8).copy()
        tensors[f"{name}.tv"] = tv_small(images=Image.open(path), return_tensors="np")["pixel_values"][0]
        tensors[f"{name}.pil"] = pil_small(images=Image.open(path), return_tensors="np")["pixel_values"][0]
        if i == 0:
            tensors[f"{name}.tv224"] = tv_default(images=Image.open(path), return_tensors="np")["pixel_values"][0]
        print(f"{path}: {loaded.mode} {loaded.size[0]}x{loaded.size[1]}")
    Image.fromarray(pattern(rng, 8, 8, 4), "CMYK").save(os.path.join(args.out, "cmyk.jpg"))
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "torchvision": torchvision.__version__, "pillow": PIL.__version__}
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()},
              os.path.join(args.out, "expected.safetensors"), metadata=meta)
    print("versions:", meta)


if __name__ == "__main__":
    main()
