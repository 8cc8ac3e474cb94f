#!/usr/bin/env python3
"""A tiny random CLIP vision tower (no download) with transformers' outputs, and LLaVA's projectors with
torch's, for tests/checkpoint/test_hf_clip.cpp:

  tests/checkpoint/fixtures/hf_clip_vision/   CLIPVisionModel: image 32, patch 8 (16 patches), hidden 32,
                                              3 layers, 4 heads, intermediate 64, quick_gelu, fp32
    outputs.safetensors    pixel_values F32 [2, 3, 32, 32] (normal(0, 1)) and transformers' outputs from
                           the stored weights in float64, stored F32: last_hidden_state [2, 17, 32],
                           pooler_output [2, 32], hidden_states_m2 [2, 17, 32] (hidden_states[-2], LLaVA's
                           vision_feature_layer)
    projector.safetensors  x F32 [6, 32]; mlp2x_gelu: multi_modal_projector.linear_1 (32 -> 48),
                           GELU (erf), linear_2 (48 -> 48), its output y_mlp2x_gelu [6, 48]; linear:
                           linear.linear_1 (32 -> 48), y_linear [6, 48]; outputs from torch in float64

Every parameter (norm weights and biases, class and position embeddings included) is redrawn from
normal(0, 0.2) so that a mapping error anywhere shows. The metadata records the versions.

Usage: python3 tools/reference/make_clip_vision_fixture.py [--out tests/checkpoint/fixtures]
"""
import argparse
import os

import torch
import transformers as tf
from safetensors.torch import save_file


def build_tower():
    cfg = tf.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                              image_size=32, patch_size=8, num_channels=3, hidden_act="quick_gelu",
                              layer_norm_eps=1e-5, projection_dim=32)
    torch.manual_seed(7)
    model = tf.CLIPVisionModel(cfg).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def projectors():
    torch.manual_seed(11)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 48))
    lin = torch.nn.Linear(32, 48)
    x = torch.randn(6, 32)
    with torch.no_grad():
        y_mlp = mlp.double()(x.double()).float()
        y_lin = lin.double()(x.double()).float()
    t = {"x": x,
         "multi_modal_projector.linear_1.weight": mlp[0].weight.float(),
         "multi_modal_projector.linear_1.bias": mlp[0].bias.float(),
         "multi_modal_projector.linear_2.weight": mlp[2].weight.float(),
         "multi_modal_projector.linear_2.bias": mlp[2].bias.float(),
         "linear.linear_1.weight": lin.weight.float(), "linear.linear_1.bias": lin.bias.float(),
         "y_mlp2x_gelu": y_mlp, "y_linear": y_lin}
    return {k: v.detach().contiguous() for k, v in t.items()}


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(root, "tests", "checkpoint", "fixtures"))
    args = ap.parse_args()
    meta = {"transformers": tf.__version__, "torch": torch.__version__}
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    out_dir = os.path.join(args.out, "hf_clip_vision")
    build_tower().save_pretrained(out_dir, safe_serialization=True)
    ref = tf.CLIPVisionModel.from_pretrained(out_dir, attn_implementation="eager").double().eval()
    torch.manual_seed(3)
    pixels = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        o = ref(pixel_values=pixels.double(), output_hidden_states=True)
    tensors = {"pixel_values": pixels,
               "last_hidden_state": o.last_hidden_state.float().contiguous(),
               "pooler_output": o.pooler_output.float().contiguous(),
               "hidden_states_m2": o.hidden_states[-2].float().contiguous()}
    save_file(tensors, os.path.join(out_dir, "outputs.safetensors"), metadata=meta)
    save_file(projectors(), os.path.join(out_dir, "projector.safetensors"), metadata=meta)
    print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}")


if __name__ == "__main__":
    main()
