#!/usr/bin/env python3
"""HF -> native -> HF through the convert_checkpoint binary, checked with transformers.

For each fixture of hf_fixtures.py: import it as a native checkpoint, export it back, then
  * every tensor of the export equals the original bit for bit (dtype, shape, bytes),
  * transformers loads the export and its float64 logits match the fixture's,
  * a diffusion export (--model-type difflm) loads in transformers too, with mask_token_id and
    is_causal=false recorded in config.json, and its logits equal the fixture's bidirectional ones.

Usage: python3 tools/reference/hf_roundtrip_check.py --bin build/bin [--fixtures tests/checkpoint/fixtures]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
import transformers as tf

CLASSES = {"GPT2LMHeadModel": tf.GPT2LMHeadModel, "LlamaForCausalLM": tf.LlamaForCausalLM,
           "Qwen2ForCausalLM": tf.Qwen2ForCausalLM, "Qwen3ForCausalLM": tf.Qwen3ForCausalLM,
           "MixtralForCausalLM": tf.MixtralForCausalLM, "Qwen3MoeForCausalLM": tf.Qwen3MoeForCausalLM}


def tensors(d):
    out = {}
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    for f in files:
        with safe_open(os.path.join(d, f), "pt") as st:
            for k in st.keys():
                out[k] = st.get_tensor(k)
    return out


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{r.stderr}")
    return r.stdout.strip()


def logits(d, ids):
    # transformers 5 reads config.json's is_causal: a diffusion export attends bidirectionally.
    arch = json.load(open(os.path.join(d, "config.json")))["architectures"][0]
    try:  # MoE: the eager expert loop (grouped GEMMs have no float64 kernel)
        m = CLASSES[arch].from_pretrained(d, dtype=torch.float64, experts_implementation="eager").eval()
    except (TypeError, ValueError):
        m = CLASSES[arch].from_pretrained(d, dtype=torch.float64).eval()
    with torch.no_grad():
        return m(ids).logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "checkpoint", "fixtures"))
    a = ap.parse_args()
    conv = os.path.join(a.bin, "convert_checkpoint")
    ok = True
    for name in ["gpt2", "llama", "qwen2", "qwen3", "qwen3_bf16", "mixtral", "qwen3_moe"]:
        src = os.path.join(a.fixtures, "hf_" + name)
        ref = safe_open(os.path.join(src, "logits.safetensors"), "pt")
        ids, want = ref.get_tensor("input_ids").long(), ref.get_tensor("logits").double()
        want_bidir = ref.get_tensor("logits_bidirectional").double()
        with tempfile.TemporaryDirectory() as tmp:
            native, out = os.path.join(tmp, "native"), os.path.join(tmp, "hf")
            run([conv, "--from-hf", src, "--to-native", native])
            run([conv, "--from-native", native, "--to-hf", out, "--max-shard-size", "30KB"])
            a_t, b_t = tensors(src), tensors(out)
            cfg = json.load(open(os.path.join(src, "config.json")))
            if cfg.get("tie_word_embeddings", name == "gpt2"):
                a_t.pop("lm_head.weight", None)
            same = set(a_t) == set(b_t) and all(a_t[k].dtype == b_t[k].dtype and torch.equal(a_t[k], b_t[k]) for k in a_t)
            got = logits(out, ids)
            err = ((got - want).abs().max() / want.abs().max()).item()
            # Diffusion export of the same weights: config records the mask token and is_causal=false, and
            # transformers' logits of the export equal the bidirectional reference.
            dn, dh = os.path.join(tmp, "dnative"), os.path.join(tmp, "dhf")
            run([conv, "--from-hf", src, "--to-native", dn, "--model-type", "difflm", "--mask-token", "5"])
            run([conv, "--from-native", dn, "--to-hf", dh])
            dcfg = json.load(open(os.path.join(dh, "config.json")))
            derr = ((logits(dh, ids) - want_bidir).abs().max() / want_bidir.abs().max()).item()
            good = same and err < 1e-6 and derr < 1e-6 and dcfg.get("mask_token_id") == 5 and dcfg.get("is_causal") is False
            ok &= good
            print(f"{name:11s} tensors={len(b_t):3d} bit-exact={same} dtype={next(iter(b_t.values())).dtype} "
                  f"logits rel err={err:.2e} | difflm export: mask_token_id={dcfg.get('mask_token_id')} "
                  f"is_causal={dcfg.get('is_causal')} logits rel err={derr:.2e} -> {'OK' if good else 'FAIL'}")
    print("ALL OK" if ok else "SOME FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
