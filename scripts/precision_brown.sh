#!/usr/bin/env bash
# Numerics of the precision modes (docs/precision.md, "Numerics on the Brown corpus"): the ~11M-parameter
# GPT-2-style model of scripts/train_brown.sh trained 300 steps on the Brown corpus in every precision
# mode, two runs at a time on one OpenMP thread each, then a table of the validation loss at the last
# step and the mean training loss of the last 50 steps, each against fp32's. Needs ../shared/ and a built
# tree (scripts/test.sh). Runs go to runs/precision_brown/; ITERS=N changes the 300 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS="${ITERS:-300}"
OUT=runs/precision_brown
SHARED=../shared
[ -f "$SHARED/data/brown.jsonl" ] || { echo "precision_brown.sh: needs $SHARED/data/brown.jsonl" >&2; exit 1; }
mkdir -p "$OUT"
if [ ! -f "$OUT/brown_text_document.idx" ]; then
  ./build/bin/preprocess_data --input "$SHARED/data/brown.jsonl" --json-keys text --output-prefix "$OUT/brown" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$SHARED/tokenizers/gpt2/vocab.json" \
    --merge-file "$SHARED/tokenizers/gpt2/merges.txt" --append-eod --workers 2
fi
COMMON=(--model-type gpt --num-layers 4 --hidden-size 192 --num-attention-heads 3 --ffn-hidden-size 768
        --seq-length 128 --micro-batch-size 4 --global-batch-size 4 --data-path "$OUT/brown_text_document"
        --split 969,30,1 --train-iters "$ITERS" --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 30
        --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --log-interval 10 --eval-interval "$ITERS"
        --eval-iters 10 --seed 1234)
# name:flags (flags joined by commas)
RUNS=("fp32:" "bf16:--bf16" "bf16_products:--bf16,--bf16-products" "fp16:--fp16" "fp8:--fp8-format,hybrid"
      "bf16_recompute:--bf16,--recompute-granularity,full")
run_one() {
  local name=${1%%:*} flags=${1#*:}
  local extra=()
  [ -n "$flags" ] && IFS=, read -r -a extra <<< "$flags"
  rm -rf "${OUT:?}/$name"
  OMP_NUM_THREADS=1 ./build/bin/pretrain_difflm "${COMMON[@]}" "${extra[@]}" --save "$OUT/$name" > "$OUT/$name.log" 2>&1
}
for ((i = 0; i < ${#RUNS[@]}; i += 2)); do
  run_one "${RUNS[i]}" &
  [ $((i + 1)) -lt ${#RUNS[@]} ] && run_one "${RUNS[i + 1]}" &
  wait
done
python3 - "$OUT" "$ITERS" "${RUNS[@]}" <<'EOF'
import json, sys
out, iters, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for spec in runs:
    name, flags = spec.split(":", 1)
    train, val, last = [], None, {}
    for line in open(f"{out}/{name}/metrics.jsonl"):
        j = json.loads(line)
        if "val_loss" in j:
            val = j["val_loss"]
        elif "loss" in j:
            last = j
            if j["iteration"] > iters - 50:
                train.append(j["loss"])
    rows[name] = (flags.replace(",", " ") or "fp32", val, sum(train) / len(train), last.get("skipped_steps", 0),
                  last.get("loss_scale"))
ref_val, ref_train = rows["fp32"][1], rows["fp32"][2]
print(f"| run | flags | val loss @{iters} | vs fp32 | train loss {iters - 49}-{iters} | vs fp32 | skipped | final loss scale |")
print("|---|---|---|---|---|---|---|---|")
for name, (flags, val, train, skipped, scale) in rows.items():
    print(f"| {name} | `{flags}` | {val:.5f} | {100 * (val / ref_val - 1):+.2f}% | {train:.4f} | "
          f"{100 * (train / ref_train - 1):+.2f}% | {skipped} | {'-' if scale is None else f'{scale:.1f}'} |")
EOF
