#!/usr/bin/env python3
"""Fixtures for the BPE trainer (src/apps/train_tokenizer.cpp):
  tests/tokenizers/fixtures/tiny_corpus.jsonl        the corpus: two Brown documents and the tricky strings
  tests/tokenizers/fixtures/trained_tokenizer.json   written by OUR train_tokenizer (vocab 700)
  tests/tokenizers/fixtures/trained_expected.jsonl   ids that HuggingFace `tokenizers` gives with that file
It also trains `tokenizers`' own ByteLevelBPETokenizer on the same corpus with the same settings and
reports whether the two vocabularies and merge lists are identical.

Usage: python3 tools/reference/make_trainer_fixture.py --train-tokenizer build/bin/train_tokenizer [--shared ../shared]
"""
import argparse
import json
import os
import subprocess
import sys

from tokenizers import ByteLevelBPETokenizer, Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_test_strings import STRINGS  # noqa: E402

VOCAB_SIZE = 700
SPECIALS = ["<|endoftext|>", "<|mask|>"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    ap.add_argument("--train-tokenizer", default=os.path.join(root, "build", "bin", "train_tokenizer"))
    args = ap.parse_args()
    fx = os.path.join(root, "tests", "tokenizers", "fixtures")

    brown = [json.loads(l)["text"] for l in open(os.path.join(args.shared, "data", "brown.jsonl"), encoding="utf-8")]
    docs = brown[:2] + [s for s in STRINGS if s and len(s) <= 400]
    corpus = os.path.join(fx, "tiny_corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, separators=(",", ":")) + "\n")

    out = os.path.join(fx, "trained_tokenizer.json")
    subprocess.run([args.train_tokenizer, "--input", corpus, "--json-keys", "text", "--vocab-size", str(VOCAB_SIZE),
                    "--special-tokens", ",".join(SPECIALS), "--min-frequency", "2", "--output", out], check=True)

    tok = Tokenizer.from_file(out)
    texts = [s for s in STRINGS if len(s) <= 400] + ["supercalifragilistic" * 40, brown[2][:3000],
                                                     "<|endoftext|>a<|mask|> <|mask|>b"]
    with open(os.path.join(fx, "trained_expected.jsonl"), "w") as f:
        for s in texts:
            ids = tok.encode(s, add_special_tokens=False).ids
            f.write(json.dumps({"text": s, "ids": ids}, separators=(",", ":")) + "\n")
    print(f"trained_tokenizer.json: vocab {tok.get_vocab_size()}; trained_expected.jsonl: {len(texts)} strings")

    hf = ByteLevelBPETokenizer()
    hf.train_from_iterator(docs, vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=SPECIALS, show_progress=False)
    hj = json.loads(hf.to_str())
    ours = json.load(open(out, encoding="utf-8"))
    hm = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in hj["model"]["merges"]]
    om = [tuple(m) for m in ours["model"]["merges"]]
    same = hj["model"]["vocab"] == ours["model"]["vocab"] and hm == om
    print(f"tokenizers' own BpeTrainer gives {'the same' if same else 'a DIFFERENT'} vocabulary and merges")


if __name__ == "__main__":
    main()
