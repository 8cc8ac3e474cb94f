#!/usr/bin/env bash
# The LLaVA shapes demo (docs/llava.md): pictures of coloured shapes (make_shapes), their conversations
# preprocessed with the images, a small CLIP tower + projector + language model trained from scratch with
# the autoregressive (gpt) and the diffusion (difflm) backbone, then every held-out picture answered
# (generate --image) and scored (score_shapes: colour, shape, count).
#   scripts/llava_shapes.sh [WORK_DIR] [BUILD_DIR]      (ITERS=6000, BACKBONES="gpt difflm" by default)
set -euo pipefail
WORK=${1:-runs/llava_shapes}
BIN=${2:-build}/bin
ITERS=${ITERS:-6000}
BACKBONES=${BACKBONES:-gpt difflm}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$WORK/data"

"$BIN/make_shapes" --output "$WORK/shapes" --num-train 4000 --num-test 200 --image-size 32 --seed 1234
for split in train test; do
  "$BIN/preprocess_data" --input "$WORK/shapes/${split}_chat.jsonl" --output-prefix "$WORK/data/$split" \
    --tokenizer-type ByteTokenizer --chat-template chatml --image-key image --image-processor "$WORK/shapes" --workers 2
done
# The held-out questions, one per picture, in the order of test.jsonl.
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
prompt = "<|im_start|>user\n<image>\nWhat is in the picture?<|im_end|>\n<|im_start|>assistant\n"
with open(f"{work}/shapes/test.jsonl") as f, open(f"{work}/questions.jsonl", "w") as out:
    for line in f:
        out.write(json.dumps({"prompt": prompt, "image": f"{work}/shapes/" + json.loads(line)["image"]}) + "\n")
PY

# The projector reads the patch embedding after pre_layrnorm (--vision-feature-layer 0) through a linear
# map: a deeper tower or the -2 feature layer with mlp2x_gelu stayed at the answers' prior for 1500 to
# 3000 steps (docs/llava.md).
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --position-embedding-type rope --normalization RMSNorm
       --swiglu --disable-bias-linear --seq-length 128
       --img-h 32 --img-w 32 --patch-dim 8 --vision-num-layers 1 --vision-hidden-size 64 --vision-num-attention-heads 4
       --vision-ffn-hidden-size 128 --vision-feature-layer 0 --projector-type linear)
TRAIN=(--micro-batch-size 16 --global-batch-size 16 --train-iters "$ITERS" --lr 3e-3 --lr-warmup-iters 20
       --data-path "$WORK/data/train_conversation_document" --split 100,0,0 --sft --log-interval 500 --eval-iters 0)

for lm in $BACKBONES; do
  rm -rf "$WORK/$lm"
  /usr/bin/time -f "$lm training: %e s" "$BIN/pretrain_difflm" --model-type llava --language-model-type "$lm" \
    "${MODEL[@]}" "${TRAIN[@]}" --save "$WORK/$lm" 2>&1 | tee "$WORK/$lm.log" | grep -E "iteration .*00/|training:|error"
  if [ "$lm" = gpt ]; then
    GEN=(--max-new-tokens 32)
  else
    GEN=(--gen-length 38 --steps 38 --block-length 38 --batch-size 20)  # 90 prompt positions + 38 = 128
  fi
  /usr/bin/time -f "$lm answers: %e s" "$BIN/generate" --load "$WORK/$lm" --prompt-file "$WORK/questions.jsonl" \
    "${GEN[@]}" --output "$WORK/$lm.answers.jsonl" 2>&1 | tail -2
  "$BIN/score_shapes" --answers "$WORK/$lm.answers.jsonl" --truth "$WORK/shapes/test.jsonl" \
    --output "$WORK/$lm.scores.json"
done
