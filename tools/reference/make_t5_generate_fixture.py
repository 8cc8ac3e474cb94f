#!/usr/bin/env python3
"""transformers' greedy generation on the tiny T5 fixtures, for tests/models/test_t5_generation.cpp.

Reads tests/checkpoint/fixtures/hf_t5{,_v11}/ (written by make_t5_fixture.py; not changed here) and writes
generate.safetensors beside each:

  input_ids, attention_mask  I32 [2, 11]  two encoder sequences, the second padded after 6 tokens
  sequences                  I32 [2, L]   model.generate(input_ids, attention_mask, do_sample=False,
                                          num_beams=1, max_new_tokens=12): the decoder start id, then
                                          the chosen ids (a sequence that ended gets the pad id after its
                                          eos); L <= 13
  logits                     F32 [L-1, 2, 100]  the raw logits of every step (output_logits=True)

The model runs in float64 (eager attention) so that the ids are the exact arithmetic's; the same
generation in float32 is checked to choose the same ids, and the smallest gap between the best and the
second-best logit over the steps is printed and stored in the metadata (a gap far above fp32 rounding
means the C++ float32 decoder must choose the same ids). The metadata also records the decoder start
and eos ids (the fixtures' config.json has pad_token_id 0 and eos_token_id 1 and no
decoder_start_token_id: T5's is the pad id, passed explicitly here) and the versions.

Usage: python3 tools/reference/make_t5_generate_fixture.py [--dir tests/checkpoint/fixtures]
"""
import argparse
import os

import torch
import transformers as tf
from safetensors.torch import save_file

# Random ids (torch.randint(2, 100) under manual_seed(5)), each sequence ended by </s> (1) and the second
# padded: of 40 such draws tried, one whose smallest top-2 gap is wide in both models (7e-4 and 9e-4, far
# above the 1e-6 an fp32 run is off by) and where one sequence ends at eos before max_new_tokens.
INPUT_IDS = [[45, 84, 39, 61, 36, 80, 38, 33, 98, 34, 1],
             [64, 69, 60, 96, 74, 1, 0, 0, 0, 0, 0]]
ATTENTION_MASK = [[1] * 11,
                  [1] * 6 + [0] * 5]
MAX_NEW_TOKENS = 12
PAD, EOS, DECODER_START = 0, 1, 0


def greedy(model, inputs):
    with torch.no_grad():
        return model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=MAX_NEW_TOKENS,
                              decoder_start_token_id=DECODER_START, eos_token_id=EOS, pad_token_id=PAD,
                              return_dict_in_generate=True, output_logits=True)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(root, "tests", "checkpoint", "fixtures"))
    args = ap.parse_args()
    inputs = {"input_ids": torch.tensor(INPUT_IDS, dtype=torch.long),
              "attention_mask": torch.tensor(ATTENTION_MASK, dtype=torch.long)}
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    for name in ["hf_t5", "hf_t5_v11"]:
        d = os.path.join(args.dir, name)
        model = tf.T5ForConditionalGeneration.from_pretrained(d, attn_implementation="eager").eval()
        out32 = greedy(model, inputs)
        out = greedy(model.double(), inputs)
        assert torch.equal(out.sequences, out32.sequences), f"{name}: float32 and float64 choose other ids"
        logits = torch.stack(out.logits)  # [steps, 2, V]
        top2 = logits.topk(2, dim=-1).values
        gap = (top2[..., 0] - top2[..., 1]).min().item()
        meta = {"transformers": tf.__version__, "torch": torch.__version__, "decoder_start_token_id": str(DECODER_START),
                "eos_token_id": str(EOS), "pad_token_id": str(PAD), "max_new_tokens": str(MAX_NEW_TOKENS),
                "smallest_top2_gap": f"{gap:.6g}"}
        tensors = {k: v.to(torch.int32).contiguous() for k, v in inputs.items()}
        tensors["sequences"] = out.sequences.to(torch.int32).contiguous()
        tensors["logits"] = logits.float().contiguous()
        path = os.path.join(d, "generate.safetensors")
        save_file(tensors, path, metadata=meta)
        os.chmod(path, 0o644)
        print(f"wrote {path}: sequences {out.sequences.tolist()}, smallest top-2 gap {gap:.4g}")


if __name__ == "__main__":
    main()
