#!/usr/bin/env bash
# TensorBoard reads pretrain_difflm's event files as its own: a 6-iteration run of a small MoE model
# with --tensorboard-dir on the small byte-tokenized corpus (scripts/small_corpus.sh), then TensorBoard's EventAccumulator
# lists the scalars and checks Megatron's tags (tools/reference/read_tensorboard.py). Installs the
# PyPI `tensorboard` package when it is missing (it needs no torch and no TensorFlow).
#
#   scripts/tensorboard_check.sh [BIN_DIR]   (default build/bin)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${1:-$ROOT/build/bin}"
if ! python3 -c "import tensorboard" 2>/dev/null; then
  python3 -m pip install --quiet --break-system-packages tensorboard 2>/dev/null ||
    python3 -m pip install --quiet tensorboard
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$ROOT/scripts/small_corpus.sh" "$BIN" "$WORK"
"$BIN/pretrain_difflm" --num-layers 2 --hidden-size 64 --num-heads 4 --seq-length 64 --micro-batch-size 4 \
  --global-batch-size 8 --data-path "$WORK/corpus_text_document" --lr 1e-3 --lr-warmup-iters 2 --train-iters 6 \
  --log-interval 2 --eval-interval 3 --eval-iters 2 --data-cache-path "$WORK/cache" \
  --num-experts 4 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3 \
  --tensorboard-dir "$WORK/tb" --log-validation-ppl-to-tensorboard --log-timers-to-tensorboard --log-throughput \
  > "$WORK/train.log" 2>&1 || { cat "$WORK/train.log" >&2; exit 2; }
python3 "$ROOT/tools/reference/read_tensorboard.py" "$WORK/tb" --require "lm loss" "lm loss vs samples" \
  learning-rate "learning-rate vs samples" grad-norm "grad-norm vs samples" batch-size loss-scale \
  iteration-time throughput "lm loss validation" "lm loss validation ppl" load_balancing_loss z_loss
