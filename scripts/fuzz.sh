#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, ASan + UBSan, in build-fuzz/) and runs each for a
# given time, starting from the seed corpora in fuzz/corpus/<target>/. Exits non-zero when a target
# finds anything (crash, sanitizer report, broken invariant, leak, timeout, memory limit), and prints
# the reproducer path. See docs/fuzzing.md.
#
#   scripts/fuzz.sh --seconds 10                    # the CI short run: every target 10 s
#   scripts/fuzz.sh --seconds 600 --jobs 2          # the long runs, two targets at a time
#   scripts/fuzz.sh --targets jsonl,safetensors --seconds 60
#   scripts/fuzz.sh --build-only
# New inputs libFuzzer finds go to build-fuzz/corpus/<target>/ (kept between runs, never into the repo);
# reproducers to build-fuzz/artifacts/<target>/; logs to build-fuzz/logs/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
BUILD="$ROOT/build-fuzz"
SECONDS_PER_TARGET=10
JOBS=1
TARGETS="jsonl indexed_dataset safetensors tokenizer_hf train_args image"
BUILD_ONLY=0
NO_BUILD=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_PER_TARGET="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --targets) TARGETS="${2//,/ }"; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --no-build) NO_BUILD=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

CXX="${CXX_FUZZ:-$(command -v clang++-14 || command -v clang++ || true)}"
[ -n "$CXX" ] || { echo "fuzz.sh: clang++ not found (apt-get install clang-14)" >&2; exit 2; }

if [ "$NO_BUILD" = 0 ]; then
  launcher=()
  if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  cmake -S fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="${CXX/clang++/clang}" "${launcher[@]}" > /dev/null
  exes=()
  for t in $TARGETS; do exes+=("fuzz_$t"); done
  ninja -C "$BUILD" -j "$(nproc)" "${exes[@]}"
fi
[ "$BUILD_ONLY" = 1 ] && exit 0

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1
mkdir -p "$BUILD/logs"

run_one() {  # run_one TARGET -> exit status of the fuzzer
  local t="$1"
  mkdir -p "$BUILD/corpus/$t" "$BUILD/artifacts/$t"
  nice -n 10 "$BUILD/fuzz_$t" "$BUILD/corpus/$t" "fuzz/corpus/$t" \
    -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -close_fd_mask=1 -artifact_prefix="$BUILD/artifacts/$t/" > "$BUILD/logs/$t.log" 2>&1
}

summary() {  # summary TARGET STATUS
  local t="$1" rc="$2" log="$BUILD/logs/$1.log"
  local execs cov ft secs
  # (|| true: a log without a line, e.g. after an early crash, is not an error of this script)
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 | awk '{print $5}' || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  local result=ok
  if [ "$rc" != 0 ]; then
    local newest
    newest=$(ls -t "$BUILD/artifacts/$t/" 2> /dev/null | head -1 || true)
    result="FINDING (exit $rc): ${newest:+$BUILD/artifacts/$t/$newest}"
  fi
  printf '%-16s %6ss %12s execs  cov %6s  ft %6s  %s\n' "$t" "${secs:-$SECONDS_PER_TARGET}" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$result"
}

failed=0
pids=()
names=()
flush() {  # waits for the running fuzzers and reports them
  local i
  for i in "${!pids[@]}"; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    summary "${names[$i]}" "$rc"
    if [ "$rc" != 0 ]; then
      failed=1
      echo "---- last lines of $BUILD/logs/${names[$i]}.log ----"
      tail -40 "$BUILD/logs/${names[$i]}.log"
    fi
  done
  pids=()
  names=()
}
echo "fuzzing ${SECONDS_PER_TARGET}s per target, $JOBS at a time: $TARGETS"
for t in $TARGETS; do
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  [ "${#pids[@]}" -ge "$JOBS" ] && flush
done
flush
exit "$failed"
