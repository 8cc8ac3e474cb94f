#!/usr/bin/env bash
# One command for a lent GPU machine (H200; CUDA 13, CMake, ninja, g++ and Python with PyTorch, no
# package registry): builds the CUDA backend stand-alone (bench/cuda/CMakeLists.txt: no oneDNN, MPI,
# json or zlib needed), runs test_cuda, then the DLM training-step benchmark and its PyTorch peer side by
# side, and the model-level checks of the nn/ modules on CUDA from a prebuilt bundle
# (scripts/gpu_dispatch_bundle.sh). Budget: about 8 minutes.
#
#   scripts/gpu_check.sh --pack    on a machine WITH GoogleTest sources (/usr/src/googletest) and PyPI or the
#                                  cuDNN frontend headers: copies GoogleTest to build-gpu-deps/googletest
#                                  and the frontend headers to build-gpu-deps/cudnn_frontend/include
#                                  (scripts/get_cudnn_frontend.sh; ~7 MB in all), to be carried with the tree
#   scripts/gpu_check.sh           on the GPU machine
#
# cuDNN's fused attention is built when the carried frontend headers are there; cuDNN itself comes from
# the toolkit or PyTorch's nvidia-cudnn wheel (CUDNN_ROOT is set to the wheel when the toolkit has none).
# Environment: MEGADLM_GPU_DEPS (default build-gpu-deps), BUILD (default build-gpu), CUDA_ARCHS (default
# 90), BENCH_ARGS (extra flags for both benchmarks, e.g. "--batch 2"), SKIP_PEER=1, SKIP_BENCH=1, SKIP_DISPATCH=1,
# BUILD_CUDA (--pack: the scripts/build_cuda.sh build the bundle takes its binaries from, default build-cuda),
# MEGADLM_ATTENTION (auto|cudnn|gemm|flash, passed to the benchmark and the tests).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEPS="${MEGADLM_GPU_DEPS:-$ROOT/build-gpu-deps}"
BUILD="${BUILD:-$ROOT/build-gpu}"
ARCHS="${CUDA_ARCHS:-90}"
BENCH_ARGS="${BENCH_ARGS:-}"
t0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }

if [[ "${1:-}" == "--pack" ]]; then
  src=/usr/src/googletest
  [[ -f $src/CMakeLists.txt ]] || { echo "gpu_check.sh --pack: no GoogleTest sources at $src" >&2; exit 1; }
  rm -rf "$DEPS/googletest" && mkdir -p "$DEPS" && cp -r "$src" "$DEPS/googletest"
  "$ROOT/scripts/get_cudnn_frontend.sh" "$DEPS/cudnn_frontend/include" \
    || echo "gpu_check.sh --pack: no cuDNN frontend headers: the GPU build will have no cuDNN attention" >&2
  # The model-level checks' prebuilt binaries (scripts/gpu_dispatch_bundle.sh; needs scripts/build_cuda.sh first).
  "$ROOT/scripts/gpu_dispatch_bundle.sh" pack "${BUILD_CUDA:-$ROOT/build-cuda}" \
    || echo "gpu_check.sh --pack: no dispatch bundle: the GPU run will skip the model checks" >&2
  echo "packed $(du -sh "$DEPS" | cut -f1) into $DEPS (carry it: it is git-ignored)"
  exit 0
fi

export PATH="/usr/local/cuda/bin:$PATH"
stamp "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi failed"
nvcc --version | tail -1

# NCCL: the toolkit's, or the nvidia-nccl wheel PyTorch depends on.
if [[ -z "${NCCL_ROOT:-}" ]]; then
  NCCL_ROOT=$(python3 - <<'PY' 2>/dev/null || true
import os, nvidia  # the nvidia-* wheels PyTorch depends on; nccl.h sits in <root>/include
for base in nvidia.__path__:
    for root, _, files in os.walk(base):
        if "nccl.h" in files:
            print(os.path.dirname(root))
            raise SystemExit
PY
)
  [[ -n "$NCCL_ROOT" ]] && export NCCL_ROOT && echo "NCCL from PyTorch's wheel: $NCCL_ROOT"
fi

# cuDNN: the toolkit's, or the nvidia-cudnn wheel PyTorch depends on (include/ and lib/ under nvidia/cudnn).
if [[ -z "${CUDNN_ROOT:-}" && ! -f /usr/local/cuda/include/cudnn.h ]]; then
  CUDNN_ROOT=$(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.cudnn'); print(list(s.submodule_search_locations)[0] if s else '')" 2>/dev/null || true)
  [[ -n "$CUDNN_ROOT" ]] && export CUDNN_ROOT && echo "cuDNN from PyTorch's wheel: $CUDNN_ROOT"
fi
FE_ARG=()
[[ -f "$DEPS/cudnn_frontend/include/cudnn_frontend.h" ]] && FE_ARG=(-DCUDNN_FRONTEND_INCLUDE="$DEPS/cudnn_frontend/include")

stamp "configure + build ($BUILD, sm_$ARCHS)"
mkdir -p "$BUILD"
GTEST_ARG=()
[[ -f "$DEPS/googletest/CMakeLists.txt" ]] && GTEST_ARG=(-DGTEST_SOURCE_DIR="$DEPS/googletest")
cmake -S "$ROOT/bench/cuda" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGADLM_CUDA_ARCHS="$ARCHS" \
  "${GTEST_ARG[@]}" "${FE_ARG[@]}" >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; echo "FAIL: configure"; exit 1; }
grep -i "nccl\|cudnn" "$BUILD/configure.log" || true
ninja -C "$BUILD" test_cuda bench_dlm_step >"$BUILD/build.log" 2>&1 || { tail -60 "$BUILD/build.log"; echo "FAIL: build"; exit 1; }
stamp "built"

stamp "test_cuda"
timeout 180 "$BUILD/test_cuda" --gtest_brief=1  # cuDNN builds (and run-time compiles) a graph per shape 2>&1 | tail -40
test_rc=${PIPESTATUS[0]}
echo "test_cuda exit code: $test_rc"

if [[ "${SKIP_DISPATCH:-0}" != 1 ]]; then
  stamp "nn modules on CUDA: CPU vs CUDA models, pretrain_difflm --device cuda (prebuilt bundle)"
  BUILD="$BUILD" "$ROOT/scripts/gpu_dispatch_bundle.sh" run
  dispatch_rc=$?
  echo "dispatch checks exit code: $dispatch_rc"
  [[ $test_rc == 0 ]] && test_rc=$dispatch_rc
fi

if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
  stamp "bench_dlm_step (MegaDLMs CUDA)"
  # shellcheck disable=SC2086
  timeout 120 "$BUILD/bench_dlm_step" --steps 4 --warmup 2 $BENCH_ARGS 2>&1 | tee "$BUILD/bench.log"
fi
if [[ "${SKIP_PEER:-0}" != 1 ]]; then
  stamp "PyTorch peer (SDPA flash, torch.compile)"
  # shellcheck disable=SC2086
  timeout 210 python3 "$ROOT/tools/reference/gpu_peer_dlm.py" --steps 4 --warmup 2 $BENCH_ARGS 2>&1 \
    | grep -v "^ *warnings.warn" | tee "$BUILD/peer.log" | tail -12
fi

stamp "summary"
grep -h "^RESULT" "$BUILD/bench.log" "$BUILD/peer.log" 2>/dev/null
ours=$(grep -ho "RESULT megadlm_cuda: .* \([0-9]*\) tokens/s" "$BUILD/bench.log" 2>/dev/null | grep -o "[0-9]* tokens/s" | cut -d' ' -f1)
peer=$(grep -ho "[0-9]* tokens/s" "$BUILD/peer.log" 2>/dev/null | tail -1 | cut -d' ' -f1)
if [[ -n "$ours" && -n "$peer" && "$peer" -gt 0 ]]; then
  awk -v a="$ours" -v b="$peer" 'BEGIN { printf "MegaDLMs / PyTorch tokens/s: %.2fx (target >= 1.3x)\n", a / b }'
fi
stamp "done (test_cuda exit $test_rc)"
exit "$test_rc"
