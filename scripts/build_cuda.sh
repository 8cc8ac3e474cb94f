#!/usr/bin/env bash
# Configure and build the CUDA backend (-DMEGADLM_CUDA=ON) on a machine with nvcc, GPU or not: the
# library with src/kernels/cuda/, test_cuda and the GPU benchmarks. CI runs it so the CUDA code never
# rots; nothing here needs a device (test_cuda skips without one).
#
#   scripts/build_cuda.sh [BUILD_DIR]        default build-cuda; env: JOBS (default: all cores),
#                                            CUDA_ARCHS (default "80;90"), NVCC (default /usr/local/cuda/bin/nvcc)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build-cuda}"
NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
ARCHS="${CUDA_ARCHS:-80;90}"
JOBS="${JOBS:-$(nproc)}"
[[ -x "$NVCC" ]] || { echo "build_cuda.sh: nvcc not found at $NVCC (set NVCC)" >&2; exit 1; }
LAUNCHER=()
if command -v ccache >/dev/null; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGADLM_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DMEGADLM_CUDA_ARCHS="$ARCHS" "${LAUNCHER[@]}" >/dev/null
targets=(megadlm test_cuda)
[[ -f "$ROOT/bench/cuda/bench_dlm_step.cpp" ]] && targets+=(bench_dlm_step)
ninja -C "$BUILD" -j"$JOBS" "${targets[@]}"
# Without a GPU every test must skip cleanly; with one they run.
"$BUILD/tests/test_cuda" --gtest_brief=1
echo "build_cuda.sh: built ${targets[*]} for sm_${ARCHS//;/, sm_} in $(( $(date +%s) - start )) s"
