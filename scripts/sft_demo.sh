#!/usr/bin/env bash
# A fine-tune that visibly works: write a word in capitals (tools/sft_task.py; TASK=reverse or add for
# the harder ones). A small base model is pretrained
# briefly on Brown, autoregressive (gpt) and diffusion (difflm); each is then fine-tuned with --sft on
# the task's conversations (ChatML, byte tokenizer); `generate` answers held-out prompts before and
# after, and the exact-match accuracy is printed and written to $OUT/results.md. An existing base
# checkpoint in $OUT is reused. TYPES picks the runs (default "gpt difflm difflm-from-gpt": the last
# fine-tunes the gpt base as a diffusion model). LETTERS sets the
# words' lengths (default 5: each letter at a fixed position, which the diffusion model learns at this
# scale; "3-6" varies them).
#
# Needs ../shared/ (Brown) and a built tree (scripts/test.sh).
#
#   scripts/sft_demo.sh   # BASE_ITERS=300 SFT_ITERS=1000 SFT_SEQ=96 HELDOUT=200 LETTERS=5 OUT=runs/sft_demo by default
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_ITERS="${BASE_ITERS:-300}"
SFT_ITERS="${SFT_ITERS:-1000}"
TASK="${TASK:-upper}"
LETTERS="${LETTERS:-5}"
TYPES="${TYPES:-gpt difflm difflm-from-gpt}"
# The SFT samples' length: a conversation padded with eod to it (the padding counts in the diffusion loss).
SFT_SEQ="${SFT_SEQ:-96}"
HELDOUT="${HELDOUT:-200}"
OUT="${OUT:-runs/sft_demo}"
BIN=build/bin
BROWN=../shared/data/brown.jsonl
[[ -f "$BROWN" ]] || { echo "sft_demo.sh: $BROWN not found (the Brown corpus lives in ../shared)" >&2; exit 2; }
mkdir -p "$OUT"

python3 tools/sft_task.py --task "$TASK" --letters "$LETTERS" --train 4000 --heldout "$HELDOUT" --out "$OUT/$TASK"
"$BIN/preprocess_data" --input "$BROWN" --json-keys text --output-prefix "$OUT/brown" \
  --tokenizer-type ByteTokenizer --append-eod --workers 2 > /dev/null
"$BIN/preprocess_data" --input "$OUT/${TASK}_train.jsonl" --chat-template chatml --output-prefix "$OUT/$TASK" \
  --tokenizer-type ByteTokenizer --append-eod > /dev/null
# The held-out prompts as the template renders a user turn followed by the assistant's generation prompt.
python3 - "$OUT/${TASK}_heldout.jsonl" "$OUT/prompts.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as f:
    for line in open(sys.argv[1]):
        q = json.loads(line)["prompt"]
        f.write(json.dumps({"prompt": f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"}) + "\n")
PY

MODEL=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 512
       --max-position-embeddings 128 --micro-batch-size 16 --global-batch-size 16 --tokenizer-type ByteTokenizer
       --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --seed 1234 --split 100,0,0
       --log-interval 100 --eval-interval 1000000 --eval-iters 0)

# Exact-match accuracy of a generate output against the held-out answers: the answer is the generated
# text up to the end-of-turn marker.
accuracy() {
  python3 - "$1" "$OUT/${TASK}_heldout.jsonl" <<'PY'
import json, sys
gen = [json.loads(l)["generation"] for l in open(sys.argv[1])]
ans = [json.loads(l)["answer"] for l in open(sys.argv[2])]
out = [g.split("<|im_end|>")[0].strip() for g in gen]
ok = sum(o == a for o, a in zip(out, ans))
letters = sum(x == y for o, a in zip(out, ans) for x, y in zip(o, a))
print(f"{ok}/{len(ans)} = {100.0 * ok / len(ans):.1f}% (letters in place {letters}/{sum(map(len, ans))})")
PY
}

answer() {  # $1 checkpoint, $2 model type, $3 output
  if [[ "$2" == gpt ]]; then
    "$BIN/generate" --load "$1" --prompt-file "$OUT/prompts.jsonl" --max-new-tokens 16 --output "$3" 2> /dev/null
  else
    "$BIN/generate" --load "$1" --prompt-file "$OUT/prompts.jsonl" --gen-length 16 --steps 16 --output "$3" 2> /dev/null
  fi
}

pretrain_base() {  # $1 model type: base_$1, pretrained on Brown unless already there
  [[ -f "$OUT/base_$1/latest_checkpointed_iteration.txt" ]] && return
  echo "== $1: pretraining $BASE_ITERS steps on Brown"
  rm -rf "$OUT/base_$1"
  "$BIN/pretrain_difflm" --model-type "$1" "${MODEL[@]}" --seq-length 128 --data-path "$OUT/brown_text_document" \
    --train-iters "$BASE_ITERS" --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 30 --save "$OUT/base_$1" \
    > "$OUT/base_$1.log" 2>&1 || { tail -5 "$OUT/base_$1.log"; exit 1; }
  tail -1 "$OUT/base_$1.log"
}

RESULTS=("| model | base model (pretrained on Brown) | after SFT |" "|---|---|---|")
for name in $TYPES; do
  # difflm-from-gpt: the gpt base fine-tuned as a diffusion model (AR-to-diffusion adaptation by
  # --finetune); its "before" is the gpt base's own answers.
  type=${name%%-*}
  base=${name##*-}
  pretrain_base "$base"
  rm -rf "$OUT/sft_$name"
  echo "== $name: SFT $SFT_ITERS steps on the $TASK conversations"
  "$BIN/pretrain_difflm" --model-type "$type" "${MODEL[@]}" --seq-length "$SFT_SEQ" \
    --data-path "$OUT/${TASK}_conversation_document" \
    --sft --finetune --load "$OUT/base_$base" --train-iters "$SFT_ITERS" --lr 1e-3 --min-lr 1e-4 \
    --lr-warmup-iters 30 --save "$OUT/sft_$name" > "$OUT/sft_$name.log" 2>&1 || { tail -5 "$OUT/sft_$name.log"; exit 1; }
  tail -1 "$OUT/sft_$name.log"
  answer "$OUT/base_$base" "$base" "$OUT/base_$base.answers.jsonl"
  answer "$OUT/sft_$name" "$type" "$OUT/sft_$name.answers.jsonl"
  before=$(accuracy "$OUT/base_$base.answers.jsonl")
  after=$(accuracy "$OUT/sft_$name.answers.jsonl")
  echo "$name: held-out exact match before SFT $before, after SFT $after"
  RESULTS+=("| $name | $before | $after |")
done
printf '%s\n' "${RESULTS[@]}" | tee "$OUT/results.md"
