#!/usr/bin/env python3
"""Checks that transformers loads our LLaVA export with the fixture's logits, and its image processor.

Runs convert_checkpoint on tests/checkpoint/fixtures/hf_llava (LLaMA text model) and hf_llava_qwen2 (Qwen2,
tied): HF -> native -> HF (fp32, and bfloat16), loads
each export with transformers' LlavaForConditionalGeneration (no missing, unexpected or mismatched tensors
allowed; the export holds transformers 5's names: model.vision_tower., model.multi_modal_projector.,
model.language_model., lm_head.), and prints the largest relative difference of its float64 logits on the
fixture's batch (two sequences with one image each) from the fixture's.

Then the image processor: a copy of the LLaMA fixture with a CLIPImageProcessor of non-default settings
saved beside it (save_pretrained) goes HF -> native -> HF; transformers' CLIPImageProcessor loads the
export's preprocessor_config.json, and its pixel values of a random image are compared with the original
processor's. The export of the fixture without one must load as CLIP's processor at the model's image size.

Usage: python3 tools/reference/check_llava_export.py [--bin build/bin/convert_checkpoint]
"""
import argparse
import os
import subprocess
import tempfile

import numpy as np
import shutil
import torch
import transformers as tf
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load_file

from hf_strict_load import load_strict


def logits(model_dir, ref):
    model = load_strict(tf.LlavaForConditionalGeneration, model_dir)
    ids = ref["input_ids"].long()
    with torch.no_grad():
        return model(input_ids=ids, pixel_values=ref["pixel_values"].double(),
                     attention_mask=torch.ones_like(ids)).logits


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(root, "build", "bin", "convert_checkpoint"))
    args = ap.parse_args()
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    for name in ["hf_llava", "hf_llava_qwen2"]:
        check(args.bin, os.path.join(root, "tests", "checkpoint", "fixtures", name))
    check_processor(args.bin, os.path.join(root, "tests", "checkpoint", "fixtures", "hf_llava"))


def check_processor(binary, fixture):
    rng = np.random.default_rng(7)
    image = Image.fromarray(rng.integers(0, 256, (23, 31, 3), dtype=np.uint8))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(fixture, src)
        original = tf.CLIPImageProcessor(size={"shortest_edge": 10}, crop_size={"height": 8, "width": 8},
                                         image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3])
        original.save_pretrained(src)
        for name, directory, want in [("with the fixture's processor", src, original),
                                      ("without one", fixture, tf.CLIPImageProcessor(
                                          size={"shortest_edge": 8}, crop_size={"height": 8, "width": 8}))]:
            native, out = os.path.join(tmp, "native_" + name[:4]), os.path.join(tmp, "hf_" + name[:4])
            subprocess.run([binary, "--from-hf", directory, "--to-native", native], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([binary, "--from-native", native, "--to-hf", out], check=True, stdout=subprocess.DEVNULL)
            got = tf.CLIPImageProcessor.from_pretrained(out)
            a = got(image, return_tensors="np")["pixel_values"]
            b = want(image, return_tensors="np")["pixel_values"]
            print(f"image processor {name}: export loads as {type(got).__name__}, pixel values {a.shape}, "
                  f"max |export - expected| {np.abs(a - b).max():.2e}")


def check(binary, fixture):
    ref = load_file(os.path.join(fixture, "logits.safetensors"))
    want = ref["logits"].double()
    with tempfile.TemporaryDirectory() as tmp:
        native = os.path.join(tmp, "native")
        subprocess.run([binary, "--from-hf", fixture, "--to-native", native], check=True, stdout=subprocess.DEVNULL)
        for what, extra in [("float32", []), ("bfloat16", ["--dtype", "bfloat16"])]:
            out = os.path.join(tmp, "hf_" + what)
            subprocess.run([binary, "--from-native", native, "--to-hf", out] + extra, check=True,
                           stdout=subprocess.DEVNULL)
            with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
                prefixes = sorted({".".join(k.split(".")[:2]) if k.startswith("model.") else k.split(".")[0]
                                   for k in f.keys()})
            got = logits(out, ref)
            err = ((got - want).abs().max() / want.abs().max()).item()
            print(f"{os.path.basename(fixture)} {what} export (tensors under {', '.join(prefixes)}): max relative logits difference from the "
                  f"fixture's {err:.2e}")


if __name__ == "__main__":
    main()
