#!/usr/bin/env python3
"""GPT-2 ids computed by HuggingFace `tokenizers` from the GPT-2 vocab.json + merges.txt:
  tests/tokenizers/fixtures/gpt2_expected.jsonl        {"text", "ids"} for the tricky strings and 100
                                                 random ones (fuzz_strings)
  tests/tokenizers/fixtures/brown_gpt2_expected.jsonl  per Brown document: id, byte count, id count and the
                                                 FNV-1a 64 of the ids (little-endian int32), so the
                                                 C++ test checks every id without a 1.4M-id fixture

Usage: python3 tools/reference/gpt2_expected_ids.py [--shared ../shared]
"""
import argparse
import json
import os
import struct
import sys

from tokenizers import ByteLevelBPETokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_test_strings import STRINGS, fuzz_strings  # noqa: E402


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for b in struct.pack(f"<{len(ids)}i", *ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    args = ap.parse_args()
    gpt2 = os.path.join(args.shared, "tokenizers", "gpt2")
    tok = ByteLevelBPETokenizer(os.path.join(gpt2, "vocab.json"), os.path.join(gpt2, "merges.txt"))
    out_dir = os.path.join(root, "tests", "tokenizers", "fixtures")
    os.makedirs(out_dir, exist_ok=True)

    with open(os.path.join(out_dir, "gpt2_expected.jsonl"), "w") as f:
        strings = STRINGS + fuzz_strings(1, 100)
        for s in strings:
            f.write(json.dumps({"text": s, "ids": tok.encode(s).ids}, separators=(",", ":")) + "\n")
    print(f"gpt2_expected.jsonl: {len(strings)} strings")

    brown = os.path.join(args.shared, "data", "brown.jsonl")
    docs = [json.loads(line) for line in open(brown, encoding="utf-8")]
    encs = tok.encode_batch([d["text"] for d in docs])
    total = 0
    with open(os.path.join(out_dir, "brown_gpt2_expected.jsonl"), "w") as f:
        for d, e in zip(docs, encs):
            total += len(e.ids)
            f.write(json.dumps({"id": d["id"], "bytes": len(d["text"].encode("utf-8")), "n_ids": len(e.ids),
                                "fnv1a64": fnv1a64(e.ids)}) + "\n")
    print(f"brown_gpt2_expected.jsonl: {len(docs)} documents, {total} ids")


if __name__ == "__main__":
    main()
