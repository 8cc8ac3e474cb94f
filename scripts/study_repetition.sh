#!/usr/bin/env bash
# Diffusion against autoregression when unique data runs out ("Diffusion Language Models are Super
# Data Learners", 2025), at small scale on two cores. An autoregressive and a masked diffusion LM of the
# same architecture are trained on nested budgets of unique tokens of Debian's fortunes corpus, every
# run seeing the same number of tokens (so the small budgets are repeated for many epochs), and judged
# on the same held-out fortunes: the validation loss during training, the exact NLL (AR) or the
# Monte Carlo negative ELBO with its standard error (diffusion) at the end, and the accuracy on a
# multiple-choice cloze set made from the held-out text. Writes results.md, curves and two plots
# under the output directory; docs/study_repetition.md reports a full run.
#   scripts/study_repetition.sh            the full study (75 minutes on two cores once built)
#   scripts/study_repetition.sh --quick    a smaller model and budget, same steps (a few minutes)
#   STUDY_OUT=DIR overrides the output directory (runs/study_repetition[_quick]); STUDY_ITERS=N the
#   steps per run (1200, quick 160: the same compute for every run, time in proportion).
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "study_repetition.sh: unknown argument '$a' (only --quick)" >&2; exit 2 ;;
  esac
done
START=$(date +%s)
SEED=1234
if [ "$QUICK" = 1 ]; then
  OUT="${STUDY_OUT:-runs/study_repetition_quick}"
  MODEL=(--num-layers 2 --hidden-size 96 --num-heads 4 --ffn-hidden-size 256)
  SEQ=64; MBS=16; ITERS="${STUDY_ITERS:-160}"; EVAL_INTERVAL=20; VOCAB=2048
  BUDGETS=(4000 16000 64000); HELDOUT_DOCS=400; MC=8; CLOZE=60; CLOZE_WORDS=30; CLOZE_MC=4
else
  OUT="${STUDY_OUT:-runs/study_repetition}"
  MODEL=(--num-layers 4 --hidden-size 192 --num-heads 4 --ffn-hidden-size 512)
  SEQ=128; MBS=16; ITERS="${STUDY_ITERS:-1200}"; EVAL_INTERVAL=100; VOCAB=4096
  BUDGETS=(25000 100000 400000); HELDOUT_DOCS=1000; MC=16; CLOZE=200; CLOZE_WORDS=60; CLOZE_MC=16
fi
if ! [[ "$ITERS" =~ ^[0-9]+$ ]] || [ "$ITERS" -lt "$EVAL_INTERVAL" ]; then
  echo "study_repetition.sh: STUDY_ITERS must be a whole number of at least $EVAL_INTERVAL, got '$ITERS'" >&2
  exit 2
fi
# LLaMA-style blocks for both families; only the attention mask and the objective differ. Diffusion
# trains with MDLM's loss: its noise levels are spread evenly over each batch, so that the validation
# loss (fixed draws of the held-out batches) is a low-variance estimate of the negative ELBO.
MODEL+=(--normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear)
TRAIN=(--seq-length "$SEQ" --micro-batch-size "$MBS" --train-iters "$ITERS" --lr 2e-3 --min-lr 1e-4
       --lr-decay-style cosine --lr-warmup-iters 20 --seed "$SEED" --log-interval 50
       --eval-interval "$EVAL_INTERVAL" --save-interval 1000000)

./scripts/install_deps.sh fortunes gnuplot-nox python3
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build --parallel --target pretrain_difflm evaluate text_to_jsonl train_tokenizer preprocess_data
# The output directory is replaced whole; anything there that this script did not make is left alone.
if [ -e "$OUT" ] && [ ! -e "$OUT/.study_repetition" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
  echo "study_repetition.sh: $OUT exists and is not a study output directory; not replacing it" >&2
  exit 2
fi
rm -rf "$OUT"
mkdir -p "$OUT/data"
touch "$OUT/.study_repetition"
D="$OUT/data"
PRE=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/tokenizer.json" --append-eod --workers 2)

echo "== 1/5 data: fortunes, $HELDOUT_DOCS documents held out, budgets of ${BUDGETS[*]} unique tokens"
FILES=$(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort)
./build/bin/text_to_jsonl --input $FILES --separator % --join-lines --output "$D/fortunes.jsonl"
python3 scripts/study/repetition_data.py split "$D/fortunes.jsonl" "$D" --heldout-docs "$HELDOUT_DOCS" \
  --cloze-items "$CLOZE" --cloze-max-words "$CLOZE_WORDS" --seed "$SEED"
./build/bin/train_tokenizer --input "$D/pool.jsonl" --vocab-size "$VOCAB" \
  --special-tokens "<|endoftext|>,<|mask|>" --output "$D/tokenizer.json"
for part in pool heldout; do
  ./build/bin/preprocess_data --input "$D/$part.jsonl" --output-prefix "$D/$part" "${PRE[@]}" > /dev/null
done
python3 scripts/study/repetition_data.py budgets "$D/pool_text_document" "$D/pool.jsonl" "$D" "${BUDGETS[@]}" \
  | tee "$OUT/budgets.txt"
for b in "${BUDGETS[@]}"; do
  ./build/bin/preprocess_data --input "$D/train_$b.jsonl" --output-prefix "$D/train_$b" "${PRE[@]}" > /dev/null
done
# Validation during training and the final evaluation both read (nearly) all the held-out text: a
# subset of a few hundred short quotations can differ from the whole by more than the effects studied.
HELDOUT_TOKENS=$(python3 scripts/study/repetition_data.py count "$D/heldout_text_document")
EVAL_ITERS=$(((HELDOUT_TOKENS - 1) / SEQ / MBS))
WINDOWS=$((EVAL_ITERS * MBS))
TRAIN+=(--eval-iters "$EVAL_ITERS")
echo "held-out: $HELDOUT_TOKENS tokens, validated as $EVAL_ITERS batches of $MBS x $SEQ"

echo "== 2/5 training: ${#BUDGETS[@]} budgets x (AR, diffusion), $ITERS iterations of $((SEQ * MBS)) tokens each"
for b in "${BUDGETS[@]}"; do
  for fam in gpt difflm; do
    run="$OUT/${fam}_$b"
    echo "-- $fam on $b unique tokens"
    t0=$(date +%s)
    extra=(); [ "$fam" = difflm ] && extra=(--dlm-loss mdlm)
    ./build/bin/pretrain_difflm --model-type "$fam" "${MODEL[@]}" "${TRAIN[@]}" "${extra[@]}" --mask-token "<|mask|>" \
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$D/tokenizer.json" \
      --train-data-path "$D/train_${b}_text_document" --valid-data-path "$D/heldout_text_document" \
      --save "$run" > "$run.log" 2>&1 || { tail -20 "$run.log"; exit 1; }
    grep "validation at iteration $ITERS" "$run.log" || true
    echo $(($(date +%s) - t0)) > "$run/seconds"
  done
done

echo "== 3/5 evaluation: held-out likelihood ($WINDOWS windows; diffusion: $MC Monte Carlo draws each) and cloze"
for b in "${BUDGETS[@]}"; do
  for fam in gpt difflm; do
    run="$OUT/${fam}_$b"
    echo "-- $run"
    ./build/bin/evaluate --load "$run" --data-path "$D/heldout_text_document" --eval-samples "$WINDOWS" \
      --mc-samples "$MC" --micro-batch-size 32 --seed "$SEED" --output "$run/eval_lik.json" > /dev/null
    ./build/bin/evaluate --load "$run" --choices-file "$D/cloze.jsonl" --mc-samples "$CLOZE_MC" \
      --micro-batch-size 32 --seed "$SEED" --output "$run/eval_mc.json" > /dev/null
  done
done

echo "== 4/5 results"
python3 scripts/study/repetition_report.py "$OUT"

echo "== 5/5 plots"
plot_curves() {  # the validation loss of every run against epochs (log scale)
  local cmd="plot" sep="" i=1
  for b in "${BUDGETS[@]}"; do
    cmd+="$sep \"$OUT/curves_gpt_$b.dat\" using 1:3 with linespoints lw 2 pt 7 ps 0.6 lc $i dt 1 title \"AR, $b\""
    cmd+=", \"$OUT/curves_difflm_$b.dat\" using 1:3 with linespoints lw 2 pt 5 ps 0.6 lc $i dt 2 title \"diffusion, $b\""
    sep=","; i=$((i + 1))
  done
  echo "$cmd"
}
gnuplot <<EOF
set terminal pngcairo size 900,540
set output "$OUT/loss_vs_epochs.png"
set title "held-out loss during training (AR: NLL; diffusion: one-draw -ELBO) by unique-token budget"
set xlabel "epochs over the unique tokens"; set ylabel "nats per token"; set logscale x; set grid
set key outside right
$(plot_curves)
EOF
gnuplot <<EOF
set terminal pngcairo size 800,480
set output "$OUT/loss_vs_unique.png"
set title "held-out loss after $((ITERS * SEQ * MBS)) training tokens, against unique tokens"
set xlabel "unique training tokens"; set ylabel "nats per token"; set logscale x; set grid
plot "$OUT/summary.dat" using 1:2:3 with yerrorlines lw 2 pt 7 title "AR, end (exact NLL)", \
     "$OUT/summary.dat" using 1:5:6 with yerrorlines lw 2 pt 5 title "diffusion, end (-ELBO, MC)", \
     "$OUT/summary.dat" using 1:4 with linespoints dt 2 lw 1 pt 7 lc 1 title "AR, best during training", \
     "$OUT/summary.dat" using 1:7 with linespoints dt 2 lw 1 pt 5 lc 2 title "diffusion, best during training"
EOF
echo "plots: $OUT/loss_vs_epochs.png $OUT/loss_vs_unique.png; table: $OUT/results.md"
echo "all in $((($(date +%s) - START) / 60)) min $((($(date +%s) - START) % 60)) s on $(nproc) cores"
