#!/usr/bin/env bash
# The small byte-tokenized corpus of the run-matrix scripts (layout_matrix.sh, bitwise_trace.sh): the
# first 120 documents of ../shared/data/brown.jsonl (a synthetic text of common words when that file is
# absent), preprocessed with the byte tokenizer into WORK/corpus_text_document.{bin,idx}.
#
# With a third argument `gpt2`, GPT-2's byte-level BPE (../shared/tokenizers/gpt2) instead.
#
#   scripts/small_corpus.sh BIN_DIR WORK_DIR [gpt2]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$1"
WORK="$2"
TOKENIZER=(--tokenizer-type ByteTokenizer)
if [[ "${3:-}" == gpt2 ]]; then
  GPT2="$ROOT/../shared/tokenizers/gpt2"
  [[ -f "$GPT2/vocab.json" ]] || { echo "small_corpus.sh: $GPT2/vocab.json not found (GPT-2's tokenizer lives in ../shared)" >&2; exit 2; }
  TOKENIZER=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2/vocab.json" --merge-file "$GPT2/merges.txt")
fi
BROWN="$ROOT/../shared/data/brown.jsonl"
if [[ -f "$BROWN" ]]; then
  head -n 120 "$BROWN" > "$WORK/corpus.jsonl"
else
  python3 - "$WORK/corpus.jsonl" <<'PY'
import json, random, sys
r = random.Random(7)
words = "the of and to in a is that for it as was with be by on not he this are or his from at which".split()
with open(sys.argv[1], "w") as f:
    for d in range(120):
        f.write(json.dumps({"text": " ".join(r.choice(words) for _ in range(200 + d))}) + "\n")
PY
fi
"$BIN/preprocess_data" --input "$WORK/corpus.jsonl" --output-prefix "$WORK/corpus" "${TOKENIZER[@]}" \
  --append-eod > "$WORK/preprocess.log" 2>&1 || { cat "$WORK/preprocess.log" >&2; exit 2; }
