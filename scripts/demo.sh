#!/usr/bin/env bash
# The README's first command: on a fresh Debian 12 machine, installs what is needed, builds, and
# trains a small masked diffusion LM for a few minutes on English text that Debian ships (the
# `fortunes` package), with a byte-level BPE tokenizer trained on that text; then samples from it.
# Everything goes under runs/demo/. Set DEMO_ITERS to change the length (default 1000 iterations).
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS="${DEMO_ITERS:-1000}"
OUT=runs/demo

./scripts/install_deps.sh
if [ ! -d /usr/share/games/fortunes ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq fortunes
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build --parallel
mkdir -p "$OUT"

echo "== 1/5 corpus: the fortune files, one quotation per document"
FILES=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort)
./build/bin/text_to_jsonl --input $FILES --separator % --join-lines --output "$OUT/fortunes.jsonl"

echo "== 2/5 tokenizer: byte-level BPE with 4096 tokens trained on the corpus"
./build/bin/train_tokenizer --input "$OUT/fortunes.jsonl" --json-keys text --vocab-size 4096 \
  --special-tokens "<|endoftext|>,<|mask|>" --output "$OUT/tokenizer.json"

echo "== 3/5 preprocess: Megatron .bin/.idx"
./build/bin/preprocess_data --input "$OUT/fortunes.jsonl" --json-keys text --output-prefix "$OUT/fortunes" \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$OUT/tokenizer.json" --append-eod --workers 2

echo "== 4/5 train: a 4-layer diffusion LM for $ITERS iterations"
rm -rf "$OUT/checkpoints"
./build/bin/pretrain_difflm --model-type difflm --num-layers 4 --hidden-size 256 --num-heads 4 \
  --seq-length 128 --batch-size 16 --data-path "$OUT/fortunes_text_document" --output-dir "$OUT/checkpoints" \
  --max-steps "$ITERS" --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 20 --lr-decay-style cosine \
  --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear \
  --ffn-hidden-size 704 --log-interval 50 --eval-interval 250 --eval-iters 4 --save-interval 250

echo "== 5/5 sample: LLaDA's reverse process, 48 tokens in 48 steps (temperature 1, random remasking)"
./build/bin/generate --load "$OUT/checkpoints" --prompt "The secret of life is" "A computer" \
  --gen-length 48 --steps 48 --block-length 16 --temperature 1.0 --remasking random --seed 1
