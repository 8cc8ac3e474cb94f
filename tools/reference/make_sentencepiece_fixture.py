#!/usr/bin/env python3
"""A tiny SentencePiece model and its ids, with the `sentencepiece` pip package:
  tests/tokenizers/fixtures/tiny_sp.model           BPE, vocab 600, byte fallback, identity normalization
                                              (as LLaMA-2's), trained on tiny_corpus.jsonl
  tests/tokenizers/fixtures/tiny_sp_expected.jsonl  {"text", "ids", "decoded"} from sentencepiece
Run make_trainer_fixture.py first (it writes tiny_corpus.jsonl).

Usage: python3 tools/reference/make_sentencepiece_fixture.py
"""
import io
import json
import os
import sys

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_test_strings import STRINGS  # noqa: E402


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    fx = os.path.join(root, "tests", "tokenizers", "fixtures")
    docs = [json.loads(l)["text"] for l in open(os.path.join(fx, "tiny_corpus.jsonl"), encoding="utf-8")]
    sentences = [line for d in docs for line in d.split("\n") if line.strip()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, vocab_size=600,
                                   model_type="bpe", byte_fallback=True, character_coverage=0.995,
                                   num_threads=1, minloglevel=2,
                                   normalization_rule_name="identity")  # no 240 KB NFKC table
    path = os.path.join(fx, "tiny_sp.model")
    with open(path, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_file=path)
    texts = [s for s in STRINGS if len(s) <= 400] + [docs[0][:2000]]
    with open(os.path.join(fx, "tiny_sp_expected.jsonl"), "w") as f:
        for s in texts:
            ids = sp.encode(s)
            f.write(json.dumps({"text": s, "ids": ids, "decoded": sp.decode(ids)}, separators=(",", ":")) + "\n")
    print(f"tiny_sp.model: {os.path.getsize(path)} bytes, vocab {sp.get_piece_size()}, eos {sp.eos_id()}; "
          f"{len(texts)} strings")


if __name__ == "__main__":
    main()
