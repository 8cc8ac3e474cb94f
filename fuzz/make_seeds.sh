#!/usr/bin/env bash
# Regenerates the seed corpora under fuzz/corpus/<target>/ with MegaDLMs' own tools (preprocess_data,
# train_tokenizer from a Release build, default ./build) plus Python's `safetensors` package for an
# independent safetensors writer. Brown lines come from ../shared/data/brown.jsonl when present.
# Usage: fuzz/make_seeds.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
OUT=fuzz/corpus
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
for t in jsonl indexed_dataset safetensors tokenizer_hf train_args image; do
  rm -rf "${OUT:?}/$t"
  mkdir -p "$OUT/$t"
done
BROWN=../shared/data/brown.jsonl

# ---- a small corpus: a few Brown documents cut to 300 characters (or made-up lines) -----------------
python3 - "$BROWN" "$TMP/small.jsonl" <<'PY'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
docs = []
if os.path.exists(src):
    with open(src) as f:
        for i, line in enumerate(f):
            if i >= 40: break
            docs.append(json.loads(line)["text"][:300])
else:
    docs = ["The Fulton County Grand Jury said Friday an investigation.", "It's 2024: naïve café, 中文 text."] * 20
with open(dst, "w") as f:
    for d in docs:
        f.write(json.dumps({"text": d, "title": d[:20]}, ensure_ascii=False) + "\n")
PY

# ---- jsonl: one mode byte, then the file ----------------------------------------------------------
python3 - "$TMP/small.jsonl" "$OUT/jsonl" <<'PY'
import gzip, sys
lines = open(sys.argv[1], "rb").read().splitlines(keepends=True)
out = sys.argv[2]
def put(name, mode, body):
    open(f"{out}/{name}", "wb").write(bytes([mode]) + body)
put("brown3", 0x00, b"".join(lines[:3]))
put("brown3_title_chunked", 0x01 | (7 << 2), b"".join(lines[3:6]))
put("brown2_gzip", 0x00, gzip.compress(b"".join(lines[6:8]), mtime=0))
put("mixed_bad_lines", 0x00 | (3 << 2),
    b'{"text": "ok"}\n'
    b'   \n'
    b'{"text": "bad \xff utf8"}\n'
    b'{"text": "unterminated\n'
    b'[1, 2, 3]\n'
    b'{"other": "missing key"}\n'
    b'{"text": ["sentence one.", "sentence two."]}\n'
    b'{"text": ["mixed", 3]}\n'
    b'{"text": 42}\n'
    b'{"text": "crlf line"}\r\n'
    b'{"text": "\\u00e9\\ud83d\\ude00 escapes"}\n'
    b'{"text": "no newline at the end"}')
put("long_line_limit", 0x02, b'{"text": "' + b"x" * 100 + b'"}\n{"text": "short"}\n')
PY

# ---- indexed_dataset: uint16 length of the .bin, the .bin, the .idx (written by preprocess_data) -----
pack_idx() {  # pack_idx PREFIX NAME
  python3 - "$1" "$OUT/indexed_dataset/$2" <<'PY'
import struct, sys
b = open(sys.argv[1] + ".bin", "rb").read()
i = open(sys.argv[1] + ".idx", "rb").read()
assert len(b) < 65536
open(sys.argv[2], "wb").write(struct.pack("<H", len(b)) + b + i)
PY
}
python3 - "$TMP" <<'PY'
import json, sys
d = sys.argv[1]
with open(f"{d}/bytes.jsonl", "w") as f:
    for t in ["Hello", "", "a tiny corpus", "x"]:
        f.write(json.dumps({"text": t}) + "\n")
with open(f"{d}/ids.jsonl", "w") as f:
    for t in ["1 2 3", "70000 5", "", "99999"]:
        f.write(json.dumps({"text": t}) + "\n")
PY
"$BUILD/bin/preprocess_data" --input "$TMP/bytes.jsonl" --output-prefix "$TMP/bytes" --tokenizer-type ByteTokenizer \
  --append-eod --log-interval 0 > /dev/null
pack_idx "$TMP/bytes_text_document" uint16_bytes
"$BUILD/bin/preprocess_data" --input "$TMP/ids.jsonl" --output-prefix "$TMP/ids" --tokenizer-type NullTokenizer \
  --vocab-size 100000 --log-interval 0 > /dev/null
pack_idx "$TMP/ids_text_document" int32_null
python3 - "$OUT/indexed_dataset" <<'PY'
import sys
d = sys.argv[1]
good = open(f"{d}/uint16_bytes", "rb").read()
blen = good[0] | (good[1] << 8)
head, idx = good[:2 + blen], good[2 + blen:]
open(f"{d}/bad_truncated_idx", "wb").write(head + idx[:-5])
open(f"{d}/bad_magic", "wb").write(head + b"XXIDIDX\0\0" + idx[9:])
open(f"{d}/bad_short_bin", "wb").write(bytes([blen - 2, 0]) + good[2:2 + blen - 2] + idx)
PY

# ---- safetensors: written by the `safetensors` package, plus broken variants ---------------------
python3 - "$OUT/safetensors" <<'PY'
import json, struct, sys
import numpy as np
from safetensors.numpy import save
d = sys.argv[1]
rng = np.random.default_rng(0)
open(f"{d}/f32_i64", "wb").write(save({"w": rng.standard_normal((2, 3)).astype(np.float32),
                                         "ids": np.arange(4, dtype=np.int64)}, metadata={"format": "pt"}))
open(f"{d}/f16_empty", "wb").write(save({"h": rng.standard_normal(5).astype(np.float16),
                                           "e": np.zeros((0, 4), np.float32)}))
def raw(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data
bf16 = raw({"b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}, "__metadata__": {"k": "v"}},
           bytes(range(8)))
open(f"{d}/bf16_handmade", "wb").write(bf16)
open(f"{d}/bad_header_len", "wb").write(struct.pack("<Q", 1 << 40) + bf16[8:])
open(f"{d}/bad_overlap", "wb").write(raw({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                          "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, bytes(8)))
open(f"{d}/bad_dtype", "wb").write(raw({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, bytes(1)))
# Findings (docs/fuzzing.md), kept as seeds: an empty tensor beside an F16 one.
h = b'{"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]}}  '
open(f"{d}/found_empty_tensor", "wb").write(struct.pack("<Q", len(h)) + h + bytes.fromhex("373d943ba1b910bdfcb8"))
PY

# ---- tokenizer_hf: tokenizer.json files (train_tokenizer, then variants), some with a text to encode ---
"$BUILD/bin/train_tokenizer" --input "$TMP/small.jsonl" --vocab-size 300 --output "$TMP/tok.json" \
  --special-tokens '<|endoftext|>,<|pad|>' > /dev/null
python3 - "$TMP/tok.json" "$OUT/tokenizer_hf" <<'PY'
import copy, json, sys
j = json.load(open(sys.argv[1]))
d = sys.argv[2]
def put(name, tok, text=None):
    b = json.dumps(tok, ensure_ascii=False, separators=(",", ":")).encode()
    if text is not None: b += b"\0" + text.encode()
    open(f"{d}/{name}", "wb").write(b)
put("trained_300", j)
put("trained_300_text", j, "The jury said<|pad|>  it's 1961 — naïve!")
llama = copy.deepcopy(j)
llama["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
llama["normalizer"] = {"type": "NFC"}
llama["added_tokens"].append({"id": 300, "content": "<mask>", "single_word": False, "lstrip": True,
                              "rstrip": True, "normalized": True, "special": True})
put("split_nfc_lstrip", llama, "a <mask> b\u0065\u0301 123456")
tiny = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
        "added_tokens": [{"id": 5, "content": "</s>", "special": True}], "decoder": None}
put("tiny_holes", tiny, "abab</s>ba")
strings = copy.deepcopy(j)
strings["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
put("string_merges", strings)
put("bad_model_type", {"model": {"type": "WordPiece", "vocab": {}}})
# Findings (docs/fuzzing.md), kept as seeds: huge ids in the vocabulary and in added_tokens.
put("found_huge_vocab_id", {"model": {"vocab": {"a": 999999999}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})
huge = copy.deepcopy(j)
huge["added_tokens"].append({"id": 999999999, "content": "<big>"})
put("found_huge_added_id", huge)
PY

# ---- train_args: command lines as the docs and scripts write them ---------------------------------
T="$OUT/train_args"
printf '%s' "--num-layers 4 --hidden-size 192 --num-attention-heads 3 --ffn-hidden-size 768 --seq-length 256 --micro-batch-size 8 --global-batch-size 8 --data-path runs/brown/brown_text_document --split 969,30,1 --train-iters 300 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 30 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --log-interval 10 --eval-interval 50 --eval-iters 10 --seed 1234 --model-type gpt" > "$T/brown_gpt"
printf '%s' "--model-type difflm --num-heads 4 --hidden-size 64 --num-layers 2 --batch-size 2 --max-steps 5 --output-dir out --data-path 0.3 a 0.7 b --swiglu --normalization RMSNorm --position-embedding-type rope --group-query-attention --num-query-groups 2 --attention-mask-type block_causal --block-length 8" > "$T/guide_spellings"
printf '%s' "--data-path x --num-experts 4 --moe-router-topk 2 --moe-grouped-gemm --lr-decay-style WSD --lr-wsd-decay-iters 10 --lr-warmup-fraction 0.1 --exit-signal-handler --exit-signal SIGINT" > "$T/moe_wsd"
printf '%s' "--data-path=x --seq-length=1 --num-attention-heads=0" > "$T/bad_values"
printf '%s\0%s\0%s' "--help" "--data-path" "x" > "$T/help_nul"
# ---- image: the PNG and JPEG test images of tests/data/fixtures/images (every PNG colour type, baseline,
# 4:4:4, progressive and grayscale JPEG) -------------------------------------------------------------
cp tests/data/fixtures/images/*.png tests/data/fixtures/images/*.jpg "$OUT/image/"

du -sh "$OUT"; find "$OUT" -type f | wc -l
