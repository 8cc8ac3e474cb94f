#!/usr/bin/env python3
"""Writes a tiny randomly initialised HuggingFace causal LM (no download) with a given tokenizer, for
demos of pretrain_difflm --load-hf (e.g. adapting an AR Qwen3 into a diffusion model).

Usage: python3 tools/reference/hf_tiny_model.py --arch qwen3 --tokenizer tokenizer.json --out DIR
       [--hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 128 --positions 256]
The vocabulary is the tokenizer's size; its eos is <|endoftext|> when present.
"""
import argparse
import json
import os
import shutil

import torch
import transformers as tf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen3", choices=["qwen3", "llama", "qwen2"])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--positions", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    tok = json.load(open(a.tokenizer))
    vocab = len(tok["model"]["vocab"])
    added = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab = max([vocab] + [i + 1 for i in added.values()])
    eos = added.get("<|endoftext|>")
    common = dict(vocab_size=vocab, hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                  num_key_value_heads=a.kv_heads, intermediate_size=a.ffn, max_position_embeddings=a.positions,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, eos_token_id=eos, bos_token_id=None)
    torch.manual_seed(a.seed)
    if a.arch == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, head_dim=a.head_dim, use_sliding_window=False))
    elif a.arch == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common, use_sliding_window=False))
    else:
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    model.save_pretrained(a.out, safe_serialization=True)
    shutil.copy(a.tokenizer, os.path.join(a.out, "tokenizer.json"))
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.out}: {type(model).__name__} vocab={vocab} eos={eos} parameters={n}")


if __name__ == "__main__":
    main()
