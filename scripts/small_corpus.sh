#!/usr/bin/env bash
# The small byte-tokenized corpus of the run-matrix scripts (layout_matrix.sh, bitwise_trace.sh): the
# first 120 documents of ../shared/data/brown.jsonl (a synthetic text of common words when that file is
# absent), preprocessed with the byte tokenizer into WORK/corpus_text_document.{bin,idx}.
#
#   scripts/small_corpus.sh BIN_DIR WORK_DIR
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$1"
WORK="$2"
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
"$BIN/preprocess_data" --input "$WORK/corpus.jsonl" --output-prefix "$WORK/corpus" --tokenizer-type ByteTokenizer \
  --append-eod > "$WORK/preprocess.log" 2>&1 || { cat "$WORK/preprocess.log" >&2; exit 2; }
