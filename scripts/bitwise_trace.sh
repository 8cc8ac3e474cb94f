#!/usr/bin/env bash
# The training trace of a fixed matrix of tiny runs, for refactors that must not change behaviour:
# the loss and gradient norm of every step (and the MoE aux loss), as metrics.jsonl prints them
# (shortest round-trip decimal of the double, so equal text means equal bits), for
#   gpt (GPT-2 style: LayerNorm, GELU, learned positions, tied embeddings) and
#   difflm (Llama / Qwen3 style: RMSNorm, SwiGLU, RoPE, QK-norm, GQA, untied, no biases),
#   dense and MoE (4 experts, top-2, aux loss), fp32 and --bf16,
#   one process, tp2, pp2 and dp2 (mpirun, one thread per rank).
# 32 runs of 20 steps. Record a trace before the change, compare after it:
#
#   scripts/bitwise_trace.sh --record before.tsv         # writes the trace
#   scripts/bitwise_trace.sh --compare before.tsv        # runs again; exits 1 unless every value is equal
#     [--build DIR] (default build) [--steps N] (default 20) [--work DIR] [--keep]
#
# The trace depends on the CPU (oneDNN picks its kernels, --bf16 its product path), so compare only
# traces taken on one machine. Data: the first 120 documents of ../shared/data/brown.jsonl, byte
# tokenizer (a synthetic text when that file is absent).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build"
STEPS=20
WORK=""
KEEP=0
MODE=""
TRACE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --record) MODE=record; TRACE="$2"; shift 2 ;;
    --compare) MODE=compare; TRACE="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "bitwise_trace.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$MODE" ]] || { echo "bitwise_trace.sh: give --record FILE or --compare FILE" >&2; exit 2; }
[[ $MODE == record || -f "$TRACE" ]] || { echo "bitwise_trace.sh: --compare $TRACE: no such file" >&2; exit 2; }
BIN="$BUILD/bin"
[[ -x "$BIN/pretrain_difflm" && -x "$BIN/preprocess_data" ]] || { echo "bitwise_trace.sh: build $BIN/pretrain_difflm and $BIN/preprocess_data first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bitwise_trace.sh: mpirun not found" >&2; exit 2; }
if [[ -z "$WORK" ]]; then WORK="$(mktemp -d /tmp/bitwise_trace.XXXXXX)"; fi
mkdir -p "$WORK"
[[ $KEEP == 1 ]] || trap 'rm -rf "$WORK"' EXIT

"$ROOT/scripts/small_corpus.sh" "$BIN" "$WORK"

common() {  # $1 model type, $2 tp
  local style
  if [[ "$1" == gpt ]]; then
    style=""
  else
    style="--normalization RMSNorm --swiglu --position-embedding-type rope --qk-layernorm --disable-bias-linear
           --untie-embeddings-and-output-weights"
  fi
  # shellcheck disable=SC2086
  echo --model-type "$1" --num-layers 4 --hidden-size 64 --num-attention-heads 4 --group-query-attention \
    --num-query-groups 2 --ffn-hidden-size 128 --seq-length 32 --max-position-embeddings 32 $style \
    --micro-batch-size 2 --global-batch-size 8 --train-iters "$STEPS" --lr 1e-3 --lr-warmup-iters 2 \
    --min-lr 1e-4 --lr-decay-style cosine --weight-decay 0.01 --clip-grad 1.0 --seed 1234 \
    --data-path "$WORK/corpus_text_document" --split 100,0,0 --tokenizer-type ByteTokenizer \
    --make-vocab-size-divisible-by $((256 / $2)) --log-interval 1 --eval-interval 100000 --eval-iters 0 \
    --data-cache-path "$WORK/cache"
}
MOE_FLAGS="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01"

# name ranks tp flags
LAYOUTS=("1|1|1|" "tp2|2|2|--tensor-model-parallel-size 2" "pp2|2|1|--pipeline-model-parallel-size 2" "dp2|2|1|")

OUT="$WORK/trace.tsv"
: > "$OUT"
FAILED_RUNS=0
for model in gpt difflm; do
  for ffn in dense moe; do
    for prec in fp32 bf16; do
      for spec in "${LAYOUTS[@]}"; do
        IFS='|' read -r layout np tp flags <<< "$spec"
        name="$model-$ffn-$prec-$layout"
        dir="$WORK/$name"
        mkdir -p "$dir"
        extra=()
        [[ $ffn == moe ]] && extra+=($MOE_FLAGS)
        [[ $prec == bf16 ]] && extra+=(--bf16)
        # shellcheck disable=SC2086
        cmd=("$BIN/pretrain_difflm" $(common "$model" "$tp") --save "$dir/ckpt" $flags "${extra[@]}")
        set +e
        if [[ $np == 1 ]]; then
          OMP_NUM_THREADS=2 "${cmd[@]}" > "$dir/log" 2>&1
        else
          OMP_NUM_THREADS=1 timeout 600 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader \
            -x OMP_NUM_THREADS -np "$np" "${cmd[@]}" > "$dir/log" 2>&1
        fi
        status=$?
        set -e
        if [[ $status != 0 ]]; then
          echo "bitwise_trace.sh: $name failed (exit $status):" >&2
          tail -3 "$dir/log" >&2
          FAILED_RUNS=1
          continue
        fi
        # The values as printed: the text is the double's shortest round-trip form.
        python3 - "$name" "$dir/ckpt/metrics.jsonl" >> "$OUT" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
for line in open(path):
    # Keep the number's text: parse_float=str gives the literal as written.
    j = json.loads(line, parse_float=str, parse_int=str)
    if "loss" not in j:
        continue
    aux = j.get("moe_aux_loss", "-")
    print(f"{name}\t{j['iteration']}\t{j['loss']}\t{j['grad_norm']}\t{aux}")
PY
        echo "  $name: $(grep -c "^$name	" "$OUT") steps" >&2
      done
    done
  done
done
[[ $FAILED_RUNS == 0 ]] || { echo "bitwise_trace.sh: some runs failed" >&2; exit 1; }

if [[ $MODE == record ]]; then
  {
    echo "# bitwise_trace.sh, $STEPS steps; $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "# run	iteration	loss	grad_norm	moe_aux_loss"
    cat "$OUT"
  } > "$TRACE"
  echo "bitwise_trace.sh: recorded $(wc -l < "$OUT") steps of 32 runs to $TRACE"
  exit 0
fi

python3 - "$TRACE" "$OUT" <<'PY'
import sys
def load(p):
    rows = {}
    for line in open(p):
        if line.startswith("#") or not line.strip():
            continue
        name, it, *vals = line.rstrip("\n").split("\t")
        rows[(name, it)] = vals
    return rows
ref, got = load(sys.argv[1]), load(sys.argv[2])
runs = sorted({k[0] for k in ref} | {k[0] for k in got})
bad = 0
for run in runs:
    keys = sorted({k for k in ref if k[0] == run} | {k for k in got if k[0] == run}, key=lambda k: int(k[1]))
    diffs = [k for k in keys if ref.get(k) != got.get(k)]
    verdict = "bitwise identical" if not diffs else f"DIFFERS at iteration {diffs[0][1]}: {ref.get(diffs[0])} vs {got.get(diffs[0])}"
    print(f"{run:28s} {len(keys):3d} steps  {verdict}")
    bad += bool(diffs)
print(f"{len(runs) - bad} of {len(runs)} runs bitwise identical (loss, grad norm, MoE aux loss of every step)")
sys.exit(1 if bad else 0)
PY
