#!/usr/bin/env python3
"""Fixtures of the WordPiece tokenizer (--tokenizer-type BertWordPieceLowerCase / BertWordPieceCase):
  tests/tokenizers/fixtures/wordpiece_vocab.txt      a 6000-token WordPiece vocab trained by HuggingFace
                                               `tokenizers` (BertWordPieceTokenizer, cased, so both
                                               cases are in it) on Brown plus the hard strings
  tests/tokenizers/fixtures/wordpiece_expected.jsonl BertTokenizerFast(vocab, do_lower_case=...)'s ids
                                               (add_special_tokens=False) and backend decode, for
                                               "uncased" and "cased":
     {"mode", "text", "ids", "decoded"}                        every hard string
     {"mode", "doc", "bytes", "n_ids", "fnv1a64", "decoded_fnv1a64"[, "ids"]}  every Brown document
                                               (full ids for the first two), FNV-1a 64 of the ids as
                                               little-endian int32 and of the decoded text's UTF-8

Usage: python3 tools/reference/wordpiece_fixture.py [--shared ../shared]
"""
import argparse
import json
import os
import struct
import sys

from tokenizers import BertWordPieceTokenizer
from transformers import BertTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_test_strings import STRINGS, fuzz_strings  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# BERT's own hard cases, beside the shared list.
BERT_STRINGS = [
    "\u00c0\u00c9\u00ce\u00d5\u00dc \u00e0\u00e9\u00ee\u00f5\u00fc \u01c4 \u01c5 \u01c6 \u0130stanbul \u00df \u1e9e \u2126 \u212b \u212a",
    "Cr\u00e8me Br\u00fbl\u00e9e, NA\u00cfVE CAF\u00c9, \u00c5ngstr\u00f6m, \u0141\u00f3d\u017a, \u0218tefan, \u1ec7\u1ee9",
    "abc\u4e2d\u6587def \u65e5\u672c\u8a9etext 123\u4e07\u5143 \u3042\u3044\u3046abc \ud55c\uae00abc",
    "\uf900\uf901\ufa0e \U00020000\U0002a700\U0002b820 \u3400\u4dbf \u9fff\u9fd0",
    "...!!!???---;;;''\"\"\u00ab\u00bb\u201e\u201c\u201d\u2018\u2019\u2026\u2014\u2013 ((([[[{{{}}}]]])))",
    "a.b,c;d:e!f?g-h_i'j\"k(l)m[n]o{p}q/r\\s|t~u`v@w#x$y%z^1&2*3+4=5<6>7",
    "\u00a1Hola! \u00bfQu\u00e9? \u300c\u5f15\u7528\u300d\u3010\u62ec\u5f27\u3011\u3001\u3002\u30fb \u061f\u060c \u0964\u0965",
    "x" * 100,
    "x" * 101,
    "\u00e9" * 100,
    "\u00e9" * 101,
    "E\u0301" * 60,
    "abc" * 34,
    "short " + "y" * 150 + " tail",
    "\x00a\x01b\x1fc\x7fd\u200be\ufeffg\ufffdh\u00adi\u2028j\u2029k\x0bl\x0cm\x85n",
    "\U0001F600\U0001F44D\U0001F3FD \u2764\ufe0f \U0001F1EF\U0001F1F5 \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "a\u0301\u0302 e\u0323\u0301 q\u0307\u0323 Z\u0335 \u0301alone n\u0303",
    "\uff21\uff22\uff23\u3000\uff46\uff55\uff4c\uff4c\uff0d\uff57\uff49\uff44\uff54\uff48\uff01\uff11\uff12\uff13",
    "\u0627\u0644\u0633\u0651\u064e\u0644\u0627\u0645\u064f \u0639\u064e\u0644\u064e\u064a\u0652\u0643\u064f\u0645\u0652 \u0661\u0662\u0663",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f",
    "\u0391\u0392\u0393 \u03ac\u03ad\u03ae \u039f\u0394\u03a5\u03a3\u03a3\u0395\u038e\u03a3 \u0416\u0401\u041b\u0422\u042b\u0419 \u0451\u0439",
    "",
    "     ",
    "\t\n\r \u3000\u00a0\u2003",
    "[CLS] hello [SEP] world [SEP]",
    "a[MASK]b[UNK]c[PAD]",
    "[sep] [Sep] [ CLS ] [[SEP]] [SEP",
    "The U.S.A. isn't 'quoted', is it? Yes -- it's 3.14 % of $5,000!",
    "##prefix ## # ### a##b",
    "\u1100\u1161\u11a8 \uac00\uac01 \ud7a3",
    "\u0130\u0131 \u1e9e\u00df \u03a3\u03c3\u03c2 \u01f0\u0149",
    # Where tokenizers' Unicode versions differ from a recent Unicode database: punctuation it does not
    # know (U+061D, U+2E43, U+2E5A) and a symbol it counts as punctuation (U+166D), non-spacing marks it
    # keeps (U+0898, U+08D3), lowercase mappings that are newer (U+1C89, U+A7CB, U+10D50), and unassigned
    # or private-use code points.
    "a\u061db\u2e43c\u2e5ad\u166de \u0898x\u08d3y \u1c89 \ua7cb \U00010d50 z\u0378z \ue000 \U000F0000 \U0010FFFF",
    "\u2e43\u2e44\u2e45 A\u0898\u0301B \u1c89\u1c8a",
]


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def ids_fnv(ids):
    return fnv1a64(struct.pack(f"<{len(ids)}i", *ids))


def train_vocab(texts, out_dir):
    trainer = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    trainer.train_from_iterator(texts, vocab_size=6000, min_frequency=2, limit_alphabet=1000,
                                special_tokens=SPECIALS, wordpieces_prefix="##")
    path = os.path.join(out_dir, "wordpiece_vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        for token, _ in sorted(trainer.get_vocab().items(), key=lambda kv: kv[1]):
            f.write(token + "\n")
    return path


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared"))
    args = ap.parse_args()
    out_dir = os.path.join(root, "tests", "tokenizers", "fixtures")
    docs = [json.loads(line)["text"] for line in open(os.path.join(args.shared, "data", "brown.jsonl"), encoding="utf-8")]
    strings = STRINGS + BERT_STRINGS + fuzz_strings(7, 80)
    vocab = train_vocab(docs + strings * 3, out_dir)

    with open(os.path.join(out_dir, "wordpiece_expected.jsonl"), "w") as f:
        for mode, lower in (("uncased", True), ("cased", False)):
            tok = BertTokenizerFast(vocab=vocab, do_lower_case=lower)  # transformers 5 names the file `vocab`
            assert len(tok) == 6000, "the tokenizer did not load the vocab file"
            backend = tok.backend_tokenizer
            for s in strings:
                ids = tok(s, add_special_tokens=False)["input_ids"]
                if len(ids) > 1000:
                    continue  # a 2000-dash run would be a sixth of the fixture
                rec = {"mode": mode, "text": s, "ids": ids, "decoded": backend.decode(ids, skip_special_tokens=False)}
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            encs = backend.encode_batch(docs, add_special_tokens=False)
            for d, (text, e) in enumerate(zip(docs, encs)):
                ids = e.ids
                assert ids == tok(text, add_special_tokens=False)["input_ids"] or d > 1
                rec = {"mode": mode, "doc": d, "bytes": len(text.encode("utf-8")), "n_ids": len(ids),
                       "fnv1a64": ids_fnv(ids),
                       "decoded_fnv1a64": fnv1a64(backend.decode(ids, skip_special_tokens=False).encode("utf-8"))}
                if d < 2:
                    rec["ids"] = ids
                f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    print(f"{vocab}: {sum(1 for _ in open(vocab, encoding='utf-8'))} tokens; {len(strings)} strings, "
          f"{len(docs)} documents, cased and uncased")


if __name__ == "__main__":
    main()
