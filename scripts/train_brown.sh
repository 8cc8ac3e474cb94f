#!/usr/bin/env bash
# Trains the ~11M-parameter GPT-2-style model on the Brown corpus (../shared/data/brown.jsonl, GPT-2
# tokenizer) as an autoregressive GPT and as a masked diffusion LM, with the same architecture and
# budget, then plots both loss curves into docs/. Needs ../shared/ and a built tree (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS="${ITERS:-300}"
OUT=runs/brown
SHARED=../shared
mkdir -p "$OUT"
if [ ! -f "$OUT/brown_text_document.idx" ]; then
  ./build/bin/preprocess_data --input "$SHARED/data/brown.jsonl" --json-keys text --output-prefix "$OUT/brown" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$SHARED/tokenizers/gpt2/vocab.json" \
    --merge-file "$SHARED/tokenizers/gpt2/merges.txt" --append-eod --workers 2
fi
COMMON=(--num-layers 4 --hidden-size 192 --num-attention-heads 3 --ffn-hidden-size 768 --seq-length 256
        --micro-batch-size 8 --global-batch-size 8 --data-path "$OUT/brown_text_document" --split 969,30,1
        --train-iters "$ITERS" --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 30 --lr-decay-style cosine
        --weight-decay 0.1 --clip-grad 1.0 --log-interval 10 --eval-interval 50 --eval-iters 10 --seed 1234)
for type in gpt difflm; do
  rm -rf "$OUT/$type"
  ./build/bin/pretrain_difflm --model-type "$type" "${COMMON[@]}" --save "$OUT/$type" 2>&1 | tee "$OUT/$type.log"
done
python3 tools/plot_metrics.py --title "Brown corpus, 11M-parameter GPT-2-style model, GPT-2 tokenizer" \
  --run "AR (gpt)=$OUT/gpt/metrics.jsonl" --run "diffusion (difflm)=$OUT/difflm/metrics.jsonl" \
  --output docs/brown_loss_curves.png
