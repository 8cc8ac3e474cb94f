#!/usr/bin/env python3
"""Checks that transformers loads our CLIP vision export with the fixture's outputs.

Runs convert_checkpoint on tests/checkpoint/fixtures/hf_clip_vision: HF -> native -> HF (fp32, with the
native checkpoint's hf_prefix set to transformers 4's "vision_model." once to exercise that naming too,
and in bfloat16), loads each export with transformers' CLIPVisionModel (no missing or unexpected
tensors allowed), and prints the largest relative difference of its float64 outputs on the fixture's
pixel values from the fixture's (last_hidden_state, pooler_output, hidden_states[-2]).

Usage: python3 tools/reference/check_clip_vision_export.py [--bin build/bin/convert_checkpoint]
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch
import transformers as tf
from safetensors.torch import load_file

from hf_strict_load import load_strict


def outputs(model_dir, pixels):
    model = load_strict(tf.CLIPVisionModel, model_dir)
    with torch.no_grad():
        o = model(pixel_values=pixels.double(), output_hidden_states=True)
    return {"last_hidden_state": o.last_hidden_state, "pooler_output": o.pooler_output,
            "hidden_states_m2": o.hidden_states[-2]}


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(root, "build", "bin", "convert_checkpoint"))
    args = ap.parse_args()
    fixture = os.path.join(root, "tests", "checkpoint", "fixtures", "hf_clip_vision")
    ref = load_file(os.path.join(fixture, "outputs.safetensors"))
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        native = os.path.join(tmp, "native")
        subprocess.run([args.bin, "--from-hf", fixture, "--to-native", native], check=True, stdout=subprocess.DEVNULL)
        runs = [("float32, the source's names", [], None), ("bfloat16", ["--dtype", "bfloat16"], None),
                ("float32, vision_model. names", [], "vision_model.")]
        for what, extra, prefix in runs:
            if prefix is not None:
                state = os.path.join(native, "iter_0000000", "state.json")
                with open(state) as f:
                    s = json.load(f)
                s["meta"]["clip_vision"]["hf_prefix"] = prefix
                with open(state, "w") as f:
                    json.dump(s, f)
            out = os.path.join(tmp, "hf_" + str(len(extra)) + str(prefix))
            subprocess.run([args.bin, "--from-native", native, "--to-hf", out] + extra, check=True,
                           stdout=subprocess.DEVNULL)
            got = outputs(out, ref["pixel_values"])
            errs = ", ".join(f"{k} {rel(got[k], ref[k].double()):.2e}" for k in got)
            print(f"{what}: max relative difference from the fixture's outputs: {errs}")


if __name__ == "__main__":
    main()
