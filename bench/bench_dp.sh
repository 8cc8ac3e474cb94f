#!/usr/bin/env bash
# Data-parallel throughput on this machine: the same small model and global batch trained
# by 2 ranks x 1 OpenMP thread (mpirun, dp2) and by 1 rank x 2 threads. Reports tokens/s of each
# (mean over the steps after the first few) and, for dp2, the share of step time spent in
# communication (CommStats of the dp group, from metrics.jsonl).
#
#   bench/bench_dp.sh [--build DIR] [--iters N] [--overlap]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build"
ITERS=30
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    --overlap) EXTRA+=(--overlap-grad-reduce --ddp-bucket-size 1000000); shift ;;
    *) echo "bench_dp.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bin"
# Passive OpenMP waiting by default: on a shared, oversubscribed machine a 2-thread process whose
# threads spin at barriers loses most of its time to the other processes (set OMP_WAIT_POLICY=active
# to measure the spinning default on a quiet machine).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
WORK="$(mktemp -d /tmp/bench_dp.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
BROWN="$ROOT/../shared/data/brown.jsonl"
if [[ -f "$BROWN" ]]; then cp "$BROWN" "$WORK/corpus.jsonl"; else
  python3 -c "
import json, random
r = random.Random(1); w = 'the of and to in a is that for it as was with be by on not he this'.split()
with open('$WORK/corpus.jsonl', 'w') as f:
    for d in range(500): f.write(json.dumps({'text': ' '.join(r.choice(w) for _ in range(400))}) + '\n')"
fi
"$BIN/preprocess_data" --input "$WORK/corpus.jsonl" --output-prefix "$WORK/corpus" --tokenizer-type ByteTokenizer \
  --append-eod > /dev/null 2>&1
FLAGS=(--model-type difflm --num-layers 4 --hidden-size 256 --num-attention-heads 8 --ffn-hidden-size 1024
       --seq-length 128 --max-position-embeddings 128 --micro-batch-size 4 --global-batch-size 16
       --train-iters "$ITERS" --lr 1e-3 --data-path "$WORK/corpus_text_document" --split 100,0,0 --tokenizer-type ByteTokenizer
       --log-interval 1 --eval-interval 100000 --eval-iters 0 --data-cache-path "$WORK/cache")
OMP_NUM_THREADS=2 "$BIN/pretrain_difflm" "${FLAGS[@]}" --save "$WORK/t2" > "$WORK/t2.log" 2>&1
OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader -x OMP_NUM_THREADS \
  -x OMP_WAIT_POLICY \
  -np 2 "$BIN/pretrain_difflm" "${FLAGS[@]}" "${EXTRA[@]}" --save "$WORK/dp2" > "$WORK/dp2.log" 2>&1
python3 - "$WORK/t2/metrics.jsonl" "$WORK/dp2/metrics.jsonl" "$(uptime)" <<'PY'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if '"loss"' in l]
def summary(p):
    r = rows(p)[3:]  # skip warm-up steps
    tps = sum(x["tokens_per_s"] for x in r) / len(r)
    step = sum(x["step_time_s"] for x in r) / len(r)
    comm = sum(x.get("comm", {}).get("dp", {}).get("seconds_per_step", 0.0) for x in r) / len(r)
    mb = sum(x.get("comm", {}).get("dp", {}).get("bytes_per_step", 0.0) for x in r) / len(r) / 1e6
    return tps, step, comm, mb
a, b = summary(sys.argv[1]), summary(sys.argv[2])
print(f"load: {sys.argv[3].strip()}; OMP_WAIT_POLICY={__import__('os').environ.get('OMP_WAIT_POLICY')}")
print(f"{'layout':<22} {'tokens/s':>10} {'step ms':>9} {'comm ms':>9} {'comm share':>10} {'dp MB/step':>10}")
print(f"{'1 rank x 2 threads':<22} {a[0]:>10.0f} {1e3*a[1]:>9.1f} {'-':>9} {'-':>10} {'-':>10}")
print(f"{'dp2: 2 ranks x 1 thr':<22} {b[0]:>10.0f} {1e3*b[1]:>9.1f} {1e3*b[2]:>9.1f} {100*b[2]/b[1]:>9.1f}% {b[3]:>10.2f}")
print(f"dp2 / (1 x 2 threads) throughput: {b[0]/a[0]:.2f}")
PY
