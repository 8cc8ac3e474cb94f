#!/usr/bin/env bash
# Configure and build the CUDA backend (-DMEGADLM_CUDA=ON) on a machine with nvcc, GPU or not: the
# library with src/kernels/cuda/, every test and app, and the GPU benchmarks. CI runs it so the CUDA code never
# rots; nothing here needs a device (test_cuda skips without one).
#
#   scripts/build_cuda.sh [BUILD_DIR]        default build-cuda; env: JOBS (default: all cores), TARGETS (default all),
#                                            CUDA_ARCHS (default "80;90"), NVCC (default /usr/local/cuda/bin/nvcc)
#
# cuDNN's fused attention (src/kernels/cuda/attention_cudnn.cpp) also needs the cuDNN frontend headers:
# scripts/get_cudnn_frontend.sh fetches them (PyPI wheel, unpacked into git-ignored
# build-gpu-deps/cudnn_frontend/include) when missing, so CI compiles that path too. Without them (no
# network) the build goes on without it and CMake's configure line says so. SKIP_CUDNN_FRONTEND=1 skips it.
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
if [[ "${SKIP_CUDNN_FRONTEND:-0}" != 1 ]]; then
  "$ROOT/scripts/get_cudnn_frontend.sh" >/dev/null || echo "build_cuda.sh: no cuDNN frontend headers; building without cuDNN attention" >&2
fi
configure_log=$(cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGADLM_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DMEGADLM_CUDA_ARCHS="$ARCHS" "${LAUNCHER[@]}")
grep -i "cudnn\|nccl" <<<"$configure_log" || true  # what the optional parts found
# Everything: the library, every test binary, the apps (pretrain_difflm --device cuda) and the benchmarks.
# TARGETS="megadlm test_cuda" narrows it.
read -r -a targets <<<"${TARGETS:-all}"
ninja -C "$BUILD" -j"$JOBS" "${targets[@]}"
# Without a GPU every test must skip cleanly; with one they run.
"$BUILD/tests/test_cuda" --gtest_brief=1
echo "build_cuda.sh: built ${targets[*]} for sm_${ARCHS//;/, sm_} in $(( $(date +%s) - start )) s"
