#!/usr/bin/env python3
"""Tiny random T5 checkpoints (no download) with their logits, for tests/checkpoint/test_hf_t5.cpp:

  tests/checkpoint/fixtures/hf_t5/      v1.0 style: feed_forward_proj "relu", the output tied to the
                                        shared embedding and scaled by d_model**-0.5
  tests/checkpoint/fixtures/hf_t5_v11/  v1.1 style: "gated-gelu" (wi_0, wi_1), an untied lm_head, no scaling

vocab 100, d_model 32, 4 heads of d_kv 6 (inner size 24 != d_model, as HF allows), d_ff 40, 2 encoder + 2
decoder layers, relative_attention_num_buckets 8 and max_distance 16 (so that the inputs' distances reach
the logarithmic buckets), fp32. Every parameter (norm weights and the bias tables included) is redrawn
from normal(0, 0.2) so that a mapping error anywhere shows in the logits. The v1.1 file holds lm_head.weight
different from shared.weight with config.json's tie_word_embeddings false, as google/t5-v1_1-* checkpoints
do (transformers 5 then loads the two untied). Beside each, logits.safetensors holds the fixed inputs
(input_ids, attention_mask I32 [2, 9], the second sequence padded after 5 tokens; decoder_input_ids,
decoder_attention_mask I32 [2, 6]) and transformers' logits computed in float64 from the stored weights
(eager attention): logits F32 [2, 6, 100]. The metadata records the transformers and torch versions.

Usage: python3 tools/reference/make_t5_fixture.py [--out tests/checkpoint/fixtures]
"""
import argparse
import json
import os

import torch
import transformers as tf
from safetensors.torch import load_file, save_file

INPUT_IDS = [[13, 57, 8, 91, 24, 66, 5, 38, 1],
             [44, 19, 72, 3, 1, 0, 0, 0, 0]]
ATTENTION_MASK = [[1] * 9,
                  [1, 1, 1, 1, 1, 0, 0, 0, 0]]
DECODER_INPUT_IDS = [[0, 31, 77, 12, 50, 9],
                     [0, 85, 26, 61, 4, 17]]
DECODER_ATTENTION_MASK = [[1] * 6, [1] * 6]


def build(feed_forward_proj, seed):
    cfg = tf.T5Config(vocab_size=100, d_model=32, d_kv=6, d_ff=40, num_layers=2, num_decoder_layers=2, num_heads=4,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16,
                      feed_forward_proj=feed_forward_proj, layer_norm_epsilon=1e-6, dropout_rate=0.0,
                      attn_implementation="eager")
    torch.manual_seed(seed)
    model = tf.T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def untie(out_dir, seed):
    """The v1.1 form: an lm_head of its own in the file, tie_word_embeddings false in config.json."""
    path = os.path.join(out_dir, "model.safetensors")
    tensors = load_file(path)
    g = torch.Generator().manual_seed(seed)
    tensors["lm_head.weight"] = torch.randn(tensors["shared.weight"].shape, generator=g) * 0.2
    save_file(tensors, path, metadata={"format": "pt"})
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["tie_word_embeddings"] = False
    cfg.pop("scale_decoder_outputs", None)  # transformers 5 derives it from tie_word_embeddings
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(root, "tests", "checkpoint", "fixtures"))
    args = ap.parse_args()
    inputs = {"input_ids": INPUT_IDS, "attention_mask": ATTENTION_MASK, "decoder_input_ids": DECODER_INPUT_IDS,
              "decoder_attention_mask": DECODER_ATTENTION_MASK}
    inputs = {k: torch.tensor(v, dtype=torch.long) for k, v in inputs.items()}
    meta = {"transformers": tf.__version__, "torch": torch.__version__}
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    for name, ff, seed in [("hf_t5", "relu", 1), ("hf_t5_v11", "gated-gelu", 2)]:
        out_dir = os.path.join(args.out, name)
        build(ff, seed).save_pretrained(out_dir, safe_serialization=True)
        os.remove(os.path.join(out_dir, "generation_config.json"))  # not read by the conversion
        if ff == "gated-gelu":
            untie(out_dir, seed + 100)
        ref = tf.T5ForConditionalGeneration.from_pretrained(out_dir, attn_implementation="eager").double().eval()
        if ff == "gated-gelu":
            assert not torch.equal(ref.lm_head.weight, ref.shared.weight), "the v1.1 lm_head must load untied"
        with torch.no_grad():
            logits = ref(**inputs).logits
        tensors = {k: v.to(torch.int32) for k, v in inputs.items()}
        tensors["logits"] = logits.float().contiguous()
        save_file(tensors, os.path.join(out_dir, "logits.safetensors"), metadata=meta)
        for f in os.listdir(out_dir):
            os.chmod(os.path.join(out_dir, f), 0o644)
        print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}")


if __name__ == "__main__":
    main()
