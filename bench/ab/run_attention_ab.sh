#!/usr/bin/env bash
# The attention kernels of a git revision (old) against the working tree's (new), in one process, called
# alternately (bench/ab/attention_ab.cpp says why and how). Builds two shared objects of
# src/kernels/cpu/attention.cpp and attention_bf16.cpp with the library's flags (-O3 -march=native
# -fno-math-errno -fopenmp), the driver, and runs it at gpt2-small's shape (B=8, H=6) and gpt2-124m's
# (B=4, H=12), T=256, D=64, causal and bidirectional.
#
# Usage: bench/ab/run_attention_ab.sh [REV] [REPS]   (REV defaults to HEAD, REPS to 60; OMP_NUM_THREADS
#        as set, 2 if unset). Needs g++ and git; builds nothing under build/.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev="${1:-HEAD}"
reps="${2:-60}"
git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "run_attention_ab: '$rev' is not a git revision" >&2; exit 2; }
[[ "$reps" =~ ^[0-9]+$ && "$reps" -ge 2 ]] || { echo "run_attention_ab: REPS must be a number >= 2, got '$reps'" >&2; exit 2; }
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old"
git archive "$rev" src | tar -x -C "$work/old"

flags=(-O3 -std=gnu++20 -march=native -fno-math-errno -fopenmp -fPIC -DNDEBUG)
kernels() {  # $1: source root, $2: output
  g++ "${flags[@]}" -shared -I"$1" "$1/kernels/cpu/attention.cpp" "$1/kernels/cpu/attention_bf16.cpp" -o "$2"
}
echo "building: $rev's kernels, the working tree's, the driver" >&2
kernels "$work/old/src" "$work/old.so"
kernels src "$work/new.so"
g++ -O2 -std=gnu++20 -march=native -Isrc bench/ab/attention_ab.cpp -ldl -o "$work/attention_ab"

echo "old: $rev ($(git rev-parse --short "$rev")), new: the working tree; $OMP_NUM_THREADS threads"
for shape in "8 256 6 64" "4 256 12 64"; do
  for mask in causal none; do
    # shellcheck disable=SC2086  # the shape is four arguments
    "$work/attention_ab" "$work/old.so" "$work/new.so" $shape "$reps" "$mask"
  done
done
