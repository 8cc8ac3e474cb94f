#!/usr/bin/env python3
"""Small tokenizer.json files written by HuggingFace `tokenizers` from the GPT-2 files, and their ids:
  tests/tokenizers/fixtures/hf_gpt2_small.json    ByteLevel pre-tokenizer, <|endoftext|>
  tests/tokenizers/fixtures/hf_prefix_small.json  ByteLevel(add_prefix_space=True)
  tests/tokenizers/fixtures/hf_llama3_small.json  Split(LLaMA-3 regex) + ByteLevel(use_regex=False),
                                            ignore_merges, LLaMA-3 specials, an lstrip token and a
                                            normalized (non-special) added token
  tests/tokenizers/fixtures/hf_qwen2_small.json   NFC normalizer + Split(Qwen2 regex), merges rewritten as
                                            legacy "a b" strings, an rstrip token
  tests/tokenizers/fixtures/hf_no_eod_small.json  ByteLevel, no special token and no <|endoftext|> in the
                                            vocabulary (that text is ordinary text to `tokenizers`)
  tests/tokenizers/fixtures/hf_expected.jsonl     {"tokenizer", "text", "ids"} computed by `tokenizers` (tricky
                                            strings, special tokens in text, 40 random strings)
  tests/tokenizers/fixtures/nfc_expected.jsonl    {"text", "nfc"}: `tokenizers`' NFC normalizer on random
                                            strings rich in combining marks, Hangul and exclusions
To stay small the BPE keeps GPT-2's first 600 merges (and the tokens they need, renumbered).

Usage: python3 tools/reference/make_hf_fixtures.py [--shared ../shared]
"""
import argparse
import json
import os
import sys

import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_test_strings import STRINGS, fuzz_strings  # noqa: E402

LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
N_MERGES = 600

EXTRA = [
    "<|begin_of_text|>Hello<|eot_id|><|end_of_text|>",
    "x <mask> y  <mask>z\t<mask>",
    "say hello world twice: hello world!hello worlds",
    "<|begin_of_text <|eot_id|",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "a [R]   b [R]\n\nc",
    "<|endoftext|>Hello<|endoftext|> World<|endoftext|>",
    "e\u0301t\u00e9 a\u0308\u0323 q\u0307\u0323 \u1100\u1161\u11a8 \uac00\u11a8 \u212b \u0344 \u0958 \u2126hm",
]

# Code points for the NFC test strings: starters that compose, marks of several classes, Hangul jamo and
# syllables, singletons and composition exclusions, and plain letters.
NFC_POOL = ("aeoAEOuUcCnNsSzZ \u0300\u0301\u0302\u0303\u0308\u030a\u030c\u0323\u0327\u0328\u0345\u0334"
            "\u05b0\u05b8\u05bc\u0591\u0651\u064b\u093c\u0bbe\u0bd7\u0b47\u0b3e\u1100\u1112\u1161\u1175"
            "\u11a8\u11c2\uac00\uac01\ud7a3\u212b\u2126\u0344\u0958\u0f73\u1e9b\u00c5\u00e9\u01fa\u03d3"
            "\u1f80\u3099\u304b\u30cf\uff76\U0001d15e\U000110ab\U000110ba")


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    args = ap.parse_args()
    gpt2 = os.path.join(args.shared, "tokenizers", "gpt2")
    full_vocab = json.load(open(os.path.join(gpt2, "vocab.json"), encoding="utf-8"))
    lines = open(os.path.join(gpt2, "merges.txt"), encoding="utf-8").read().split("\n")
    merges = [tuple(l.split(" ")) for l in lines[1:] if l][:N_MERGES]
    keep = {t for t, i in full_vocab.items() if i < 256} | {a + b for a, b in merges} | {"<|endoftext|>"}
    vocab = {t: n for n, t in enumerate(sorted(keep, key=lambda t: full_vocab[t]))}

    out_dir = os.path.join(root, "tests", "tokenizers", "fixtures")
    split = lambda pat: pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    configs = {
        "hf_gpt2_small.json": dict(pre=pre_tokenizers.ByteLevel(add_prefix_space=False), ignore=False,
                                   special=["<|endoftext|>"], other=[]),
        "hf_prefix_small.json": dict(pre=pre_tokenizers.ByteLevel(add_prefix_space=True), ignore=False,
                                     special=["<|endoftext|>"], other=[]),
        "hf_llama3_small.json": dict(pre=split(LLAMA3), ignore=True,
                                     special=["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                                              AddedToken("<mask>", lstrip=True, special=True)],
                                     other=["hello world"]),
        "hf_qwen2_small.json": dict(pre=split(QWEN2), ignore=False,
                                    special=["<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                             AddedToken("[R]", rstrip=True, special=True)],
                                    other=[], nfc=True),
        "hf_no_eod_small.json": dict(pre=pre_tokenizers.ByteLevel(add_prefix_space=False), ignore=False,
                                     special=[], other=[], no_eod=True),
    }
    strings = [s for s in STRINGS if len(s) <= 400] + ["supercalifragilistic" * 40] + EXTRA + fuzz_strings(2, 40, 40)
    with open(os.path.join(out_dir, "hf_expected.jsonl"), "w") as out:
        for name, c in configs.items():
            v = {t: n for t, n in vocab.items() if t != "<|endoftext|>"} if c.get("no_eod") else vocab
            tok = Tokenizer(models.BPE(vocab=v, merges=merges, ignore_merges=c["ignore"]))
            tok.pre_tokenizer = c["pre"]
            if c.get("nfc"):
                tok.normalizer = normalizers.NFC()
            tok.decoder = decoders.ByteLevel()
            if c["special"]:
                tok.add_special_tokens(c["special"])
            if c["other"]:
                tok.add_tokens(c["other"])
            path = os.path.join(out_dir, name)
            tok.save(path)
            # Rewritten compactly (the fixtures stay small); Qwen2's with the pre-0.20 "a b" merges.
            j = json.load(open(path, encoding="utf-8"))
            if name == "hf_qwen2_small.json":
                j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, ensure_ascii=False, separators=(",", ":"))
            tok = Tokenizer.from_file(path)  # the ids come from the file as written
            for s in strings:
                ids = tok.encode(s, add_special_tokens=False).ids
                out.write(json.dumps({"tokenizer": name, "text": s, "ids": ids}, separators=(",", ":")) + "\n")
            print(f"{name}: vocab {tok.get_vocab_size()}, {os.path.getsize(path)} bytes")

    rng = random.Random(1234)
    nfc = normalizers.NFC()
    with open(os.path.join(out_dir, "nfc_expected.jsonl"), "w") as out:
        for k in range(300):
            s = "".join(rng.choice(NFC_POOL) for _ in range(rng.randint(1, 12)))
            out.write(json.dumps({"text": s, "nfc": nfc.normalize_str(s)}, separators=(",", ":")) + "\n")
    print("nfc_expected.jsonl: 300 strings")


if __name__ == "__main__":
    main()
