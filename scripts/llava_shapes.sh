#!/usr/bin/env bash
# The LLaVA shapes demo (docs/llava.md): pictures of coloured shapes (make_shapes), their conversations
# preprocessed with the images, a small CLIP tower + projector + language model trained from scratch with
# the autoregressive (gpt) and the diffusion (difflm) backbone, then every held-out picture answered
# (generate --image) and scored (score_shapes: colour, shape, count).
#   scripts/llava_shapes.sh [WORK_DIR] [BUILD_DIR]      (ITERS=6000, BACKBONES="gpt difflm" by default)
# IMAGE_SIZE (32) and PATCH (8) set the pictures and the tower's patches: P = (IMAGE_SIZE / PATCH)^2
# positions an image; the sequence length is the 75 prompt tokens and P image positions before the answer,
# plus 38 for the answer and its padding (128 at the defaults). PROJECTOR (linear) and FEATURE_LAYER (0)
# choose the projector and the tower's output it reads.
set -euo pipefail
WORK=${1:-runs/llava_shapes}
BIN=${2:-build}/bin
ITERS=${ITERS:-6000}
IMAGE_SIZE=${IMAGE_SIZE:-32}
PATCH=${PATCH:-8}
P=$(( (IMAGE_SIZE / PATCH) * (IMAGE_SIZE / PATCH) ))
SEQ=$(( 75 + P + 38 ))
GEN_LENGTH=38
PROJECTOR=${PROJECTOR:-linear}
FEATURE_LAYER=${FEATURE_LAYER:-0}
BACKBONES=${BACKBONES:-gpt difflm}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$WORK/data"

"$BIN/make_shapes" --output "$WORK/shapes" --num-train 4000 --num-test 200 --image-size "$IMAGE_SIZE" --seed 1234
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
       --swiglu --disable-bias-linear --seq-length "$SEQ"
       --img-h "$IMAGE_SIZE" --img-w "$IMAGE_SIZE" --patch-dim "$PATCH" --vision-num-layers 1 --vision-hidden-size 64 --vision-num-attention-heads 4
       --vision-ffn-hidden-size 128 --vision-feature-layer "$FEATURE_LAYER" --projector-type "$PROJECTOR")
TRAIN=(--micro-batch-size 16 --global-batch-size 16 --train-iters "$ITERS" --lr 3e-3 --lr-warmup-iters 20
       --data-path "$WORK/data/train_conversation_document" --split 100,0,0 --sft --log-interval 500 --eval-iters 0)

for lm in $BACKBONES; do
  rm -rf "$WORK/$lm"
  /usr/bin/time -f "$lm training: %e s" "$BIN/pretrain_difflm" --model-type llava --language-model-type "$lm" \
    "${MODEL[@]}" "${TRAIN[@]}" --save "$WORK/$lm" 2>&1 | tee "$WORK/$lm.log" | grep -E "iteration .*00/|training:|error"
  if [ "$lm" = gpt ]; then
    GEN=(--max-new-tokens 32)
  else
    # The prompt's 75 + P positions and GEN_LENGTH answer positions: the training sequence length.
    GEN=(--gen-length "$GEN_LENGTH" --steps "$GEN_LENGTH" --block-length "$GEN_LENGTH" --batch-size 20)
  fi
  /usr/bin/time -f "$lm answers: %e s" "$BIN/generate" --load "$WORK/$lm" --prompt-file "$WORK/questions.jsonl" \
    "${GEN[@]}" --output "$WORK/$lm.answers.jsonl" 2>&1 | tail -2
  "$BIN/score_shapes" --answers "$WORK/$lm.answers.jsonl" --truth "$WORK/shapes/test.jsonl" \
    --output "$WORK/$lm.scores.json"
done
