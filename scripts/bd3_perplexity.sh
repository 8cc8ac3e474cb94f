#!/usr/bin/env bash
# BD3-LM's comparison at small scale: autoregressive, block diffusion with blocks of 4 and of 16, and
# MDLM-style masked diffusion, trained with the same model, data and token budget, then scored on
# held-out text by `evaluate`: the exact perplexity for AR, the ELBO bound for the others (BD3 over
# t ~ U[eps, 1] per block; MDLM over t ~ U[eps, 1] per sequence). Prints the table and writes it, with
# a bar plot, under docs/.
#
# Data: Brown (../shared/data/brown.jsonl), byte tokenizer; documents 1-450 train, 451-500 held out.
# Needs ../shared/ and a built tree (scripts/test.sh); the plot needs matplotlib.
#
#   scripts/bd3_perplexity.sh            # ITERS=400 by default; OMP_NUM_THREADS as set
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS="${ITERS:-400}"
OUT=runs/bd3_perplexity
BIN=build/bin
BROWN=../shared/data/brown.jsonl
[[ -f "$BROWN" ]] || { echo "bd3_perplexity.sh: $BROWN not found (the Brown corpus lives in ../shared)" >&2; exit 2; }
mkdir -p "$OUT"
head -n 450 "$BROWN" > "$OUT/train.jsonl"
tail -n 50 "$BROWN" > "$OUT/heldout.jsonl"
for part in train heldout; do
  "$BIN/preprocess_data" --input "$OUT/$part.jsonl" --json-keys text --output-prefix "$OUT/$part" \
    --tokenizer-type ByteTokenizer --append-eod --workers 2 > /dev/null
done

COMMON=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 512 --seq-length 128
        --max-position-embeddings 128 --micro-batch-size 8 --global-batch-size 8 --train-iters "$ITERS"
        --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 50 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0
        --seed 1234 --data-path "$OUT/train_text_document" --split 100,0,0 --tokenizer-type ByteTokenizer
        --log-interval 100 --eval-interval 1000000 --eval-iters 0)
declare -A FLAGS=(
  [ar]="--model-type gpt"
  [bd3_L4]="--model-type difflm --block-diffusion --block-length 4"
  [bd3_L16]="--model-type difflm --block-diffusion --block-length 16"
  [mdlm]="--model-type difflm --dlm-loss mdlm"
)
RUNS=(ar bd3_L4 bd3_L16 mdlm)
for run in "${RUNS[@]}"; do
  echo "== $run: pretrain_difflm ${FLAGS[$run]} ($ITERS steps)"
  rm -rf "$OUT/$run"
  # shellcheck disable=SC2086
  "$BIN/pretrain_difflm" ${FLAGS[$run]} "${COMMON[@]}" --save "$OUT/$run" > "$OUT/$run.log" 2>&1 ||
    { tail -5 "$OUT/$run.log"; exit 1; }
  tail -1 "$OUT/$run.log"
  "$BIN/evaluate" --load "$OUT/$run" --data-path "$OUT/heldout_text_document" --eval-samples 64 --mc-samples 32 \
    --output "$OUT/$run.eval.json" > /dev/null
done

python3 - "$OUT" "$ITERS" "${RUNS[@]}" <<'PY'
import json, sys
out, iters, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
names = {"ar": "AR (exact)", "bd3_L4": "BD3-LM, L' = 4 (ELBO)", "bd3_L16": "BD3-LM, L' = 16 (ELBO)",
         "mdlm": "MDLM (ELBO)"}
rows = []
for r in runs:
    j = json.load(open(f"{out}/{r}.eval.json"))
    d = j["dataset"]
    if "nll_per_token" in d:
        rows.append((r, d["nll_per_token"], d["nll_se"], d["perplexity"]))
    else:
        rows.append((r, d["nelbo_per_token"], d["nelbo_se"], d["perplexity_bound"]))
lines = ["| model | NLL or NELBO per byte (nats) | standard error | perplexity (bound) |", "|---|---|---|---|"]
for r, m, se, p in rows:
    lines.append(f"| {names[r]} | {m:.4f} | {se:.4f} | {p:.3f} |")
table = "\n".join(lines)
print(table)
order = [r for r, *_ in sorted(rows, key=lambda x: x[3])]
print("ordering (best first):", " < ".join(names[r] for r in order))
open(f"{out}/table.md", "w").write(table + "\n")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar([names[r].replace(" (", "\n(") for r, *_ in rows], [p for *_, p in rows],
           yerr=[[p - __import__("math").exp(m - 2 * se) for _, m, se, p in rows],
                 [__import__("math").exp(m + 2 * se) - p for _, m, se, p in rows]], color="#4878a8")
    ax.set_ylabel("held-out perplexity (bound)")
    ax.set_title(f"Brown, byte tokenizer, 4 layers x 128, {iters} steps of 8 x 128 tokens", fontsize=9)
    fig.tight_layout()
    fig.savefig("docs/bd3_perplexity.png", dpi=110)
    print("plot: docs/bd3_perplexity.png")
except ImportError:
    print("matplotlib not installed: no plot")
PY
