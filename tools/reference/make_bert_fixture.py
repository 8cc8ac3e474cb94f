#!/usr/bin/env python3
"""Tiny random BERT checkpoints (no download) with their logits, for tests/checkpoint/test_hf_bert.cpp:

  tests/checkpoint/fixtures/hf_bert/      BertForPreTraining, hidden_act "gelu" (erf)
  tests/checkpoint/fixtures/hf_bert_mlm/  BertForMaskedLM, hidden_act "gelu_new" (tanh), 3 token types

vocab 100, hidden 32, 2 layers, 4 heads, intermediate 64, fp32. Every parameter (norm weights and
biases included) is redrawn from normal(0, 0.1) so that a mapping error anywhere shows in the logits; the
MLM decoder stays tied to the word embeddings. Saved with save_pretrained (safetensors). Beside each,
logits.safetensors holds the fixed inputs (input_ids, token_type_ids, attention_mask: I32 [2, 10], the
second sequence padded after 6 tokens) and transformers' logits computed in float64 from the stored
weights: mlm_logits F32 [2, 10, 100] and, for BertForPreTraining, nsp_logits F32 [2, 2]. The metadata
records the transformers and torch versions.

Usage: python3 tools/reference/make_bert_fixture.py [--out tests/checkpoint/fixtures]
"""
import argparse
import os

import torch
import transformers as tf
from safetensors.torch import save_file

INPUT_IDS = [[2, 17, 42, 5, 88, 1, 60, 23, 9, 71],
             [2, 44, 13, 99, 7, 3, 0, 0, 0, 0]]
TOKEN_TYPES = [[0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
               [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]]
ATTENTION_MASK = [[1] * 10,
                  [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]]


def build(cls, hidden_act, type_vocab_size, seed):
    cfg = tf.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, type_vocab_size=type_vocab_size,
                        hidden_act=hidden_act, layer_norm_eps=1e-12, tie_word_embeddings=True,
                        attn_implementation="eager")
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.1)
    model.tie_weights()
    return model


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(root, "tests", "checkpoint", "fixtures"))
    args = ap.parse_args()
    ids = torch.tensor(INPUT_IDS, dtype=torch.long)
    types = torch.tensor(TOKEN_TYPES, dtype=torch.long)
    mask = torch.tensor(ATTENTION_MASK, dtype=torch.long)
    meta = {"transformers": tf.__version__, "torch": torch.__version__}
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    for name, cls, act, ntypes, seed in [("hf_bert", tf.BertForPreTraining, "gelu", 2, 1),
                                         ("hf_bert_mlm", tf.BertForMaskedLM, "gelu_new", 3, 2)]:
        model = build(cls, act, ntypes, seed)
        out_dir = os.path.join(args.out, name)
        model.save_pretrained(out_dir, safe_serialization=True)
        # The reference from the stored weights, in float64.
        ref = cls.from_pretrained(out_dir, attn_implementation="eager").double().eval()
        t = torch.tensor(TOKEN_TYPES, dtype=torch.long) % ntypes
        with torch.no_grad():
            o = ref(input_ids=ids, token_type_ids=t, attention_mask=mask)
        tensors = {"input_ids": ids.to(torch.int32), "token_type_ids": t.to(torch.int32),
                   "attention_mask": mask.to(torch.int32)}
        if cls is tf.BertForPreTraining:
            tensors["mlm_logits"] = o.prediction_logits.float().contiguous()
            tensors["nsp_logits"] = o.seq_relationship_logits.float().contiguous()
        else:
            tensors["mlm_logits"] = o.logits.float().contiguous()
        save_file(tensors, os.path.join(out_dir, "logits.safetensors"), metadata=meta)
        print(f"wrote {out_dir}: {sorted(os.listdir(out_dir))}")


if __name__ == "__main__":
    main()
