#!/usr/bin/env bash
# Context parallelism's memory: one training step of an 8,192-token diffusion micro-batch, by one
# process and by cp4 (4 ranks x 1 OpenMP thread, each holding 2,048 tokens of the sequence). Prints, for
# each, the trainer's start-up estimate (weights + gradients + AdamW, activations) and what it measured
# after the first step (the activation arena's high-water and the peak RSS of rank 0).
#
#   bench/bench_cp_memory.sh [--build DIR] [--seq N] [--cp N]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build"
SEQ=8192
CP=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --seq) SEQ="$2"; shift 2 ;;
    --cp) CP="$2"; shift 2 ;;
    *) echo "bench_cp_memory.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bin"
[[ -x "$BIN/pretrain_difflm" && -x "$BIN/preprocess_data" ]] || { echo "bench_cp_memory.sh: build $BIN/pretrain_difflm and $BIN/preprocess_data first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_cp_memory.sh: mpirun not found" >&2; exit 2; }
WORK="$(mktemp -d /tmp/bench_cp_memory.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
"$ROOT/scripts/small_corpus.sh" "$BIN" "$WORK"

# A LLaMA-style diffusion model whose activations, not its weights, dominate at this length.
FLAGS=(--model-type difflm --num-layers 8 --hidden-size 512 --num-attention-heads 8 --ffn-hidden-size 1408
  --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear
  --seq-length "$SEQ" --max-position-embeddings "$SEQ" --micro-batch-size 1 --global-batch-size 1
  --train-iters 1 --lr 1e-4 --seed 1234 --data-path "$WORK/corpus_text_document" --split 100,0,0
  --tokenizer-type ByteTokenizer --log-interval 1 --eval-interval 100000 --eval-iters 0
  --data-cache-path "$WORK/cache")

report() {  # $1 label, $2 log
  echo "== $1"
  grep -E "memory estimate:|memory after the first step|iteration +1/" "$2" | sed -E 's/^\[[^]]*\] +//'
}

OMP_NUM_THREADS=2 "$BIN/pretrain_difflm" "${FLAGS[@]}" > "$WORK/one.log" 2>&1 || { tail -5 "$WORK/one.log" >&2; exit 1; }
report "one process, $SEQ tokens" "$WORK/one.log"
OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -x OMP_NUM_THREADS \
  -np "$CP" "$BIN/pretrain_difflm" "${FLAGS[@]}" --context-parallel-size "$CP" > "$WORK/cp.log" 2>&1 ||
  { tail -5 "$WORK/cp.log" >&2; exit 1; }
report "cp$CP, $((SEQ / CP)) tokens per rank (rank 0's figures)" "$WORK/cp.log"
