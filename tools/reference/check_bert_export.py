#!/usr/bin/env python3
"""Loads a BERT directory exported by convert_checkpoint (--to-hf ... --layout bert) with transformers
and checks that it gives the reference logits of the fixture it came from (make_bert_fixture.py):
the MLM logits at the unpadded positions and the NSP logits (BertForPreTraining), max |diff| relative
to the largest |reference logit|, and that every tensor equals the fixture's (the weights themselves).

  convert_checkpoint --from-hf tests/checkpoint/fixtures/hf_bert --to-native /tmp/b
  convert_checkpoint --from-native /tmp/b --to-hf /tmp/b_hf --layout bert
  python3 tools/reference/check_bert_export.py /tmp/b_hf tests/checkpoint/fixtures/hf_bert

Exit status 1 when a check fails (relative error above 1e-5, or a tensor differs).
"""
import sys

import torch
import transformers as tf
from safetensors import safe_open


def tensors(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def main():
    exported, fixture = sys.argv[1], sys.argv[2]
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    ref = tensors(f"{fixture}/logits.safetensors")
    arch = tf.AutoConfig.from_pretrained(exported).architectures[0]  # the class config.json names
    model = getattr(tf, arch).from_pretrained(exported, attn_implementation="eager").double().eval()
    ids, types, mask = (ref[k].long() for k in ("input_ids", "token_type_ids", "attention_mask"))
    with torch.no_grad():
        out = model(input_ids=ids, token_type_ids=types, attention_mask=mask)
    mlm = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
    keep = mask.bool()
    want = ref["mlm_logits"].double()
    err = ((mlm - want).abs()[keep].max() / want[keep].abs().max()).item()
    ok = err <= 1e-5
    print(f"{type(model).__name__}: MLM logits (unpadded positions) max relative error {err:.2e}")
    if "nsp_logits" in ref:
        w = ref["nsp_logits"].double()
        e = ((out.seq_relationship_logits - w).abs().max() / w.abs().max()).item()
        print(f"  NSP logits max relative error {e:.2e}")
        ok = ok and e <= 1e-5
    a, b = tensors(f"{exported}/model.safetensors"), tensors(f"{fixture}/model.safetensors")
    same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    print(f"  tensors: {len(a)} exported, {len(b)} in the fixture, {'all equal' if same else 'DIFFERENT'}")
    sys.exit(0 if ok and same else 1)


if __name__ == "__main__":
    main()
