#!/usr/bin/env bash
# GPT-2 tokenizer throughput, ours (bench_tokenizer) against HuggingFace `tokenizers`
# (tools/bench_tokenizer_hf.py), on the same corpus and files, printed as one table whose last two
# columns are the speed ratio to HF single-threaded and to HF batched (all cores).
#
# Usage: bench/run_tokenizer_bench.sh [build-dir] [corpus.jsonl]
#   defaults: build/ and ../shared/data/brown.jsonl; REPEATS (default 3) and THREADS (default 1,2)
#   come from the environment. Needs `pip install tokenizers`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
CORPUS=${2:-$ROOT/../shared/data/brown.jsonl}
GPT2=${GPT2_DIR:-$ROOT/../shared/tokenizers/gpt2}
REPEATS=${REPEATS:-3}
THREADS=${THREADS:-1,2}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

common=(--input "$CORPUS" --vocab-file "$GPT2/vocab.json" --merge-file "$GPT2/merges.txt" --repeats "$REPEATS")
"$BUILD/bench/bench_tokenizer" "${common[@]}" --threads "$THREADS" >>"$OUT"
RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 "$ROOT/tools/bench_tokenizer_hf.py" "${common[@]}" \
  --name hf-1thread >>"$OUT"
TOKENIZERS_PARALLELISM=true python3 "$ROOT/tools/bench_tokenizer_hf.py" "${common[@]}" --name hf-batch >>"$OUT"

python3 - "$OUT" <<'PY'
import sys
rows = [l.split()[1:] for l in open(sys.argv[1]) if l.startswith("RESULT")]
rows = [(n, int(t), float(s), int(k), int(b)) for n, t, s, k, b in rows]
ref = {n: s for n, t, s, k, b in rows}
tok = {k for n, t, s, k, b in rows}
print(f"corpus: {rows[0][4] / 1e6:.2f} MB, {rows[0][3]} tokens" + ("" if len(tok) == 1 else f"  TOKEN COUNTS DIFFER: {sorted(tok)}"))
print(f"{'impl':<11}{'threads':>8}{'seconds':>10}{'Mtok/s':>9}{'MB/s':>9}{'vs HF 1-thread':>16}{'vs HF batched':>15}")
for n, t, s, k, b in rows:
    print(f"{n:<11}{t:>8}{s:>10.4f}{k / s / 1e6:>9.3f}{b / s / 1e6:>9.2f}"
          f"{ref['hf-1thread'] / s:>15.2f}x{ref['hf-batch'] / s:>14.2f}x")
PY
