#!/usr/bin/env python3
"""Writes small Megatron MMIDIDX (version 1) datasets with numpy, independently of the C++ writer.

The layout follows the format as Megatron-Core's indexed_dataset.py defines it:
  .idx = b"MMIDIDX\\x00\\x00" | <Q version=1 | <B dtype code | <Q sequence count | <Q document-index count
         | int32[S] sequence lengths | int64[S] sequence byte offsets | int64[D] document index
  .bin = the tokens of every sequence back to back in the dtype
Dtype codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16.
The document index starts at 0 and gets one entry (the running sequence count) per document, so a
document with no sequence (an empty text) repeats the previous entry.

Outputs (committed under tests/data/fixtures/):
  megatron_small_uint16.{bin,idx}   vocabulary < 65500 -> uint16 (what preprocess_data picks)
  megatron_small_int32.{bin,idx}    vocabulary >= 65500 -> int32
  megatron_small_expected.json      the documents as lists of sequences, for the C++ tests

Usage: python3 tools/reference/make_megatron_idx.py [output_dir]
"""
import json
import os
import struct
import sys

import numpy as np

CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6, np.float32: 7, np.uint16: 8}


def write_mmidx(prefix, documents, dtype):
    """documents: list of documents, each a list of sequences (lists of token ids)."""
    lengths, doc_index = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(np.asarray(seq, dtype=dtype).tobytes(order="C"))
                lengths.append(len(seq))
            doc_index.append(len(lengths))
    item = np.dtype(dtype).itemsize
    pointers = np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64) * item)[:-1]]) if lengths else []
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(np.asarray(lengths, dtype=np.int32).tobytes(order="C"))
        f.write(np.asarray(pointers, dtype=np.int64).tobytes(order="C"))
        f.write(np.asarray(doc_index, dtype=np.int64).tobytes(order="C"))


def make_documents(rng, vocab, eod):
    docs = []
    # Varied lengths, an empty document (no sequence), a one-token document, a multi-sequence
    # document (as --split-sentences or a list-valued json field produce), ids at both ends.
    for length in [7, 1, 0, 13, 3, 29, 2, 11]:
        if length == 0:
            docs.append([])
            continue
        seq = [int(x) for x in rng.integers(0, vocab, size=length - 1)] + [eod]
        docs.append([seq])
    docs.append([[0, vocab - 1, 5], [vocab - 2], [1, 2, 3, 4, eod]])
    docs.append([[vocab - 1] * 4 + [eod]])
    return docs


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "fixtures")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240611)
    expected = {}
    for name, dtype, vocab in [("uint16", np.uint16, 50257), ("int32", np.int32, 100277)]:
        eod = vocab - 1
        docs = make_documents(rng, vocab, eod)
        write_mmidx(os.path.join(out, f"megatron_small_{name}"), docs, dtype)
        expected[name] = {"dtype_code": CODES[dtype], "vocab_size": vocab, "documents": docs}
    with open(os.path.join(out, "megatron_small_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
