#!/usr/bin/env bash
# The README's first command: on a fresh Debian 12 machine, installs what is needed, builds the
# programs, and makes a small masked diffusion LM the way large ones are made today: a short
# autoregressive pretraining on English text that Debian ships (the `fortunes` package, with a
# byte-level BPE trained on it), then adaptation of that model into a diffusion model. It samples
# with LLaDA's reverse process, prints the share of the sampled words that are English words
# (Debian's word list), and draws both loss curves into runs/demo/loss.png.
# Everything goes under runs/demo/. DEMO_AR_ITERS and DEMO_DLM_ITERS set the two lengths.
set -euo pipefail
cd "$(dirname "$0")/.."
AR_ITERS="${DEMO_AR_ITERS:-400}"
DLM_ITERS="${DEMO_DLM_ITERS:-150}"
OUT=runs/demo
START=$(date +%s)

# The build's packages, and the corpus, the word list the samples are scored against, and the plotter.
./scripts/install_deps.sh fortunes wamerican gnuplot-nox
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build --parallel --target pretrain_difflm convert_checkpoint generate text_to_jsonl train_tokenizer \
  preprocess_data
mkdir -p "$OUT"
MODEL=(--num-layers 4 --hidden-size 192 --num-heads 4 --ffn-hidden-size 512 --normalization RMSNorm --swiglu
       --position-embedding-type rope --disable-bias-linear)
TRAIN=(--seq-length 128 --micro-batch-size 16 --data-path "$OUT/fortunes_text_document" --lr-warmup-iters 20
       --lr-decay-style cosine --min-lr 1e-4 --log-interval 10 --eval-interval 100000 --save-interval 100000)

echo "== 1/6 corpus: the fortune files, one quotation per document"
FILES=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort)
./build/bin/text_to_jsonl --input $FILES --separator % --join-lines --output "$OUT/fortunes.jsonl"

echo "== 2/6 tokenizer: byte-level BPE with 4096 tokens trained on the corpus"
./build/bin/train_tokenizer --input "$OUT/fortunes.jsonl" --json-keys text --vocab-size 4096 \
  --special-tokens "<|endoftext|>,<|mask|>" --output "$OUT/tokenizer.json"

echo "== 3/6 preprocess: Megatron .bin/.idx"
./build/bin/preprocess_data --input "$OUT/fortunes.jsonl" --json-keys text --output-prefix "$OUT/fortunes" \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$OUT/tokenizer.json" --append-eod --workers 2

echo "== 4/6 pretrain: a 4-layer autoregressive LM (LLaMA style) for $AR_ITERS iterations"
rm -rf "$OUT/ar" "$OUT/ar_hf" "$OUT/checkpoints"
./build/bin/pretrain_difflm --model-type gpt "${MODEL[@]}" "${TRAIN[@]}" --train-iters "$AR_ITERS" --lr 2e-3 \
  --save "$OUT/ar"

echo "== 5/6 adapt: the same weights as a masked diffusion LM (bidirectional) for $DLM_ITERS iterations"
./build/bin/convert_checkpoint --from-native "$OUT/ar" --to-hf "$OUT/ar_hf" --layout llama
./build/bin/pretrain_difflm --load-hf "$OUT/ar_hf" --model-type difflm --mask-token "<|mask|>" "${TRAIN[@]}" \
  --train-iters "$DLM_ITERS" --lr 1e-3 --save "$OUT/checkpoints"

echo "== 6/6 sample: LLaDA's reverse process, 48 tokens in 48 steps (blocks of 16, low-confidence remasking)"
./build/bin/generate --load "$OUT/checkpoints" --gen-length 48 --steps 48 --block-length 16 --temperature 1.0 \
  --remasking low_confidence --seed 1 --prompt "The secret of life is" "A computer" "Love is" "The best way to" \
  "In the beginning" "Money can" "A good friend" "Never trust" | tee "$OUT/samples.txt"
echo
echo "samples: $(./scripts/word_share.sh --samples "$OUT/samples.txt") are English words (wamerican)"

# Loss curves: the autoregressive loss, then the diffusion loss (an upper bound on the NLL) after it.
loss_points() {  # metrics.jsonl -> "iteration loss" lines, iterations offset by $2
  sed -n 's/.*"iteration":\([0-9]*\),"loss":\([-0-9.eE+]*\).*/\1 \2/p' "$1" | awk -v o="$2" '{ print $1 + o, $2 }'
}
loss_points "$OUT/ar/metrics.jsonl" 0 > "$OUT/ar_loss.dat"
loss_points "$OUT/checkpoints/metrics.jsonl" "$AR_ITERS" > "$OUT/dlm_loss.dat"
gnuplot <<EOF
set terminal pngcairo size 800,480
set output "$OUT/loss.png"
set title "runs/demo: autoregressive pretraining, then adaptation into a diffusion LM"
set xlabel "iteration"; set ylabel "training loss (nats per token)"; set grid
plot "$OUT/ar_loss.dat" with linespoints lw 2 pt 7 ps 0.5 title "autoregressive (next token)", \
     "$OUT/dlm_loss.dat" with linespoints lw 2 pt 7 ps 0.5 title "masked diffusion (LLaDA loss, ELBO bound)"
EOF
echo "loss curves: $OUT/loss.png; all in $((($(date +%s) - START) / 60)) min $((($(date +%s) - START) % 60)) s"
