#!/usr/bin/env bash
# The LLaVA shapes demo (docs/llava.md): pictures of coloured shapes (make_shapes), their conversations
# preprocessed with the images, a small CLIP tower + projector + language model trained from scratch with
# the autoregressive (gpt) and the diffusion (difflm) backbone, then every held-out picture answered
# (generate --image) and scored (score_shapes: colour, shape, count), and a grid of the first 16 pictures
# with the answers drawn (tools/shapes_grid.py, WORK_DIR/grid.png).
#   scripts/llava_shapes.sh [WORK_DIR] [BUILD_DIR]      (BACKBONES="gpt difflm" by default)
# GPT_ITERS (10000) steps of 16 conversations for gpt. The difflm backbone is trained as Dimple trains
# its diffusion MLLM, autoregressive then diffusion: it starts from the gpt run's weights (--finetune, the
# tower and projector included) and trains DIFFLM_ITERS (6000) diffusion steps at lr 5e-4. DIFFLM_FROM=scratch
# trains it from scratch instead (DIFFLM_ITERS 20000 at lr 1e-3). ITERS sets both backbones' steps.
# The text goes through a byte-level BPE trained here on the conversations (train_tokenizer), so that
# each answer word (count, colour, shape) is one token. IMAGE_SIZE (64) and PATCH (8) set the pictures and
# the tower's patches: P = (IMAGE_SIZE / PATCH)^2 positions an image; the sequence length is the longest
# conversation with its image expanded, plus 2 (97 at the defaults). NUM_TRAIN (20000) pictures to train
# on; PROJECTOR (linear) and FEATURE_LAYER (0) choose the projector and the tower's output it reads.
set -euo pipefail
WORK=${1:-runs/llava_shapes}
BIN=${2:-build}/bin
GPT_ITERS=${ITERS:-${GPT_ITERS:-10000}}
DIFFLM_FROM=${DIFFLM_FROM:-gpt}
case "$DIFFLM_FROM" in
  gpt) DIFFLM_ITERS=${ITERS:-${DIFFLM_ITERS:-6000}}; DIFFLM_START=(--load "$WORK/gpt" --finetune --lr 5e-4) ;;
  scratch) DIFFLM_ITERS=${ITERS:-${DIFFLM_ITERS:-20000}}; DIFFLM_START=(--lr 1e-3) ;;
  *) echo "llava_shapes.sh: DIFFLM_FROM is gpt or scratch, not '$DIFFLM_FROM'" >&2; exit 2 ;;
esac
IMAGE_SIZE=${IMAGE_SIZE:-64}
PATCH=${PATCH:-8}
NUM_TRAIN=${NUM_TRAIN:-20000}
P=$(( (IMAGE_SIZE / PATCH) * (IMAGE_SIZE / PATCH) ))
PROJECTOR=${PROJECTOR:-linear}
FEATURE_LAYER=${FEATURE_LAYER:-0}
BACKBONES=${BACKBONES:-gpt difflm}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [[ " $BACKBONES " == *" difflm "* && " $BACKBONES " != *" gpt "* && "$DIFFLM_FROM" == gpt && ! -d "$WORK/gpt" ]]; then
  echo "llava_shapes.sh: difflm starts from $WORK/gpt: train gpt first (BACKBONES=\"gpt difflm\") or set DIFFLM_FROM=scratch" >&2
  exit 2
fi
mkdir -p "$WORK/data"

"$BIN/make_shapes" --output "$WORK/shapes" --num-train "$NUM_TRAIN" --num-test 200 --image-size "$IMAGE_SIZE" --seed 1234
# The tokenizer: a byte-level BPE on the training conversations' turns (the <image> marker left out: it
# is a special token, as are chatml's).
python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
with open(f"{work}/shapes/train_chat.jsonl") as f, open(f"{work}/tokenizer_corpus.jsonl", "w") as out:
    for line in f:
        for turn in json.loads(line)["conversations"]:
            out.write(json.dumps({"text": turn["value"].replace("<image>\n", "")}) + "\n")
PY
"$BIN/train_tokenizer" --type bpe --input "$WORK/tokenizer_corpus.jsonl" --vocab-size 400 --output "$WORK/tokenizer.json" \
  --special-tokens "<|endoftext|>,<|im_start|>,<|im_end|>,<image>"
for split in train test; do
  "$BIN/preprocess_data" --input "$WORK/shapes/${split}_chat.jsonl" --output-prefix "$WORK/data/$split" \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$WORK/tokenizer.json" --chat-template chatml \
    --image-key image --image-processor "$WORK/shapes" --workers 2
done
# The prompt's length (the tokens before the first response token of conversation 0, its image one
# placeholder) and the longest conversation, from the training data's index and loss mask.
read -r PROMPT LONGEST < <(python3 - "$WORK/data/train_conversation_document" <<'PY'
import struct, sys
prefix = sys.argv[1]
with open(prefix + ".idx", "rb") as f:
    f.read(9 + 8 + 1)  # magic, version, dtype
    n = struct.unpack("<Q", f.read(8))[0]
    f.read(8)  # documents
    sizes = struct.unpack(f"<{n}i", f.read(4 * n))
with open(prefix + ".loss_mask.bin", "rb") as f:
    mask = f.read(sizes[0])
print(mask.index(1), max(sizes))
PY
)
SEQ=$(( LONGEST - 1 + P + 2 ))
GEN_LENGTH=$(( SEQ - (PROMPT - 1 + P) ))  # the answer's positions after the prompt, padding included
echo "prompt $PROMPT tokens, longest conversation $LONGEST (image as one placeholder); --seq-length $SEQ, $GEN_LENGTH answer positions"
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
# map; the language model's 4 layers of 128 do the reading of the shapes (docs/llava.md: a tower with
# layers, or a language model of 2 layers of 64, stayed at 35 to 64% of the shapes).
MODEL=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --position-embedding-type rope --normalization RMSNorm
       --swiglu --disable-bias-linear --seq-length "$SEQ"
       --img-h "$IMAGE_SIZE" --img-w "$IMAGE_SIZE" --patch-dim "$PATCH" --vision-num-layers 1 --vision-hidden-size 64 --vision-num-attention-heads 4
       --vision-ffn-hidden-size 128 --vision-feature-layer "$FEATURE_LAYER" --projector-type "$PROJECTOR")
TRAIN=(--micro-batch-size 16 --global-batch-size 16 --lr-warmup-iters 20
       --data-path "$WORK/data/train_conversation_document" --split 100,0,0 --sft --log-interval 500 --eval-iters 0)

for lm in $BACKBONES; do
  rm -rf "$WORK/$lm"
  if [ "$lm" = gpt ]; then
    iters=$GPT_ITERS; START=(--lr 1e-3)
  else
    iters=$DIFFLM_ITERS; START=("${DIFFLM_START[@]}")
  fi
  /usr/bin/time -f "$lm training: %e s" "$BIN/pretrain_difflm" --model-type llava --language-model-type "$lm" \
    "${MODEL[@]}" "${TRAIN[@]}" "${START[@]}" --train-iters "$iters" --save "$WORK/$lm" 2>&1 | tee "$WORK/$lm.log" | grep -E "iteration .*00/|training:|error"
  if [ "$lm" = gpt ]; then
    GEN=(--max-new-tokens "$GEN_LENGTH")
  else
    # The prompt's positions and GEN_LENGTH answer positions: the training sequence length.
    GEN=(--gen-length "$GEN_LENGTH" --steps "$GEN_LENGTH" --block-length "$GEN_LENGTH" --batch-size 20)
  fi
  /usr/bin/time -f "$lm answers: %e s" "$BIN/generate" --load "$WORK/$lm" --prompt-file "$WORK/questions.jsonl" \
    "${GEN[@]}" --output "$WORK/$lm.answers.jsonl" 2>&1 | tail -2
  "$BIN/score_shapes" --answers "$WORK/$lm.answers.jsonl" --truth "$WORK/shapes/test.jsonl" \
    --output "$WORK/$lm.scores.json"
done
# The first 16 held-out pictures with each backbone's answer (needs Pillow: pip install pillow).
if python3 -c "import PIL" 2>/dev/null; then
  python3 "$(dirname "$0")/../tools/shapes_grid.py" "$WORK" "$WORK/grid.png"
else
  echo "Pillow not installed: no $WORK/grid.png (pip install pillow)"
fi
