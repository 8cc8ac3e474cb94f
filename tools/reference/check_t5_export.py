#!/usr/bin/env python3
"""Loads a T5 directory exported by convert_checkpoint (--to-hf ..., layout t5) with transformers and
checks that it gives the reference logits of the fixture it came from (make_t5_fixture.py): every
decoder row's logits, run in float64 and in float32, max |diff| relative to the largest |reference
logit|; that the output is as the fixture's (lm_head untied where the fixture's is, the scaling); and
that every tensor equals the fixture's (the weights themselves).

  convert_checkpoint --from-hf tests/checkpoint/fixtures/hf_t5 --to-native /tmp/t
  convert_checkpoint --from-native /tmp/t --to-hf /tmp/t_hf
  python3 tools/reference/check_t5_export.py /tmp/t_hf tests/checkpoint/fixtures/hf_t5

Exit status 1 when a check fails (relative error above 1e-5, or a tensor differs).
"""
import sys

import torch
import transformers as tf
from safetensors import safe_open


def tensors(path):
    with safe_open(path, "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def logits(directory, dtype, ref):
    model = tf.T5ForConditionalGeneration.from_pretrained(directory, attn_implementation="eager").to(dtype).eval()
    inputs = {k: ref[k].long() for k in ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")}
    with torch.no_grad():
        return model, model(**inputs).logits.double()


def main():
    exported, fixture = sys.argv[1], sys.argv[2]
    print(f"transformers {tf.__version__}, torch {torch.__version__}")
    ref = tensors(f"{fixture}/logits.safetensors")
    want = ref["logits"].double()
    ok = True
    for dtype in (torch.float64, torch.float32):
        model, got = logits(exported, dtype, ref)
        err = ((got - want).abs().max() / want.abs().max()).item()
        print(f"{type(model).__name__} ({dtype}): logits max relative error {err:.2e}")
        ok = ok and err <= 1e-5
    fixture_model = tf.T5ForConditionalGeneration.from_pretrained(fixture)
    tied = model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr()
    fixture_tied = fixture_model.lm_head.weight.data_ptr() == fixture_model.shared.weight.data_ptr()
    same_output = tied == fixture_tied and model.config.scale_decoder_outputs == fixture_model.config.scale_decoder_outputs
    print(f"  output: {'tied' if tied else 'untied'}, scale_decoder_outputs {model.config.scale_decoder_outputs}"
          f" ({'as' if same_output else 'NOT as'} the fixture)")
    a, b = tensors(f"{exported}/model.safetensors"), tensors(f"{fixture}/model.safetensors")
    same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    print(f"  tensors: {len(a)} exported, {len(b)} in the fixture, {'all equal' if same else 'DIFFERENT'}")
    sys.exit(0 if ok and same and same_output else 1)


if __name__ == "__main__":
    main()
