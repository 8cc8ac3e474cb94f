#!/usr/bin/env bash
# One command for a lent GPU machine (sm_90, e.g. an H100 or H200; CUDA 13, CMake, ninja, g++ and
# Python with PyTorch, no package registry): test_cuda (every suite, one process each), the DLM
# training-step benchmark and its PyTorch peer side by side, the MoE grouped-products benchmark
# (bench_grouped_gemm: grouped against the per-expert loop), and a few pretrain_difflm --device cuda
# runs; meanwhile it builds the CUDA backend stand-alone there (bench/cuda/CMakeLists.txt: no oneDNN,
# MPI, json or zlib needed) and reports that build. Its usual duration is in docs/cuda.md; the
# timeouts cap it near 9 minutes.
#
# The binaries come from the carried bundle (scripts/gpu_dispatch_bundle.sh: test_cuda, bench_dlm_step,
# pretrain_difflm, built here for x86-64-v4 and sm_90) when they start there, else from the stand-alone
# build, which is then waited for. Logs go to $OUT when it is set (the device tool brings that folder
# back), else to $BUILD/logs.
#
#   scripts/gpu_check.sh --pack    here, on a machine with nvcc, GoogleTest sources (/usr/src/googletest) and
#                                  PyPI or the cuDNN frontend headers: copies GoogleTest and the frontend
#                                  headers (scripts/get_cudnn_frontend.sh) to build-gpu-deps/, builds
#                                  build-cuda-port and packs the bundle there (~25 MB in all), to be carried
#   scripts/gpu_check.sh           on the GPU machine
#
# cuDNN's fused attention is built when the carried frontend headers are there; cuDNN itself comes from
# the toolkit or PyTorch's nvidia-cudnn wheel (CUDNN_ROOT is set to the wheel when the toolkit has none).
# Environment: MEGADLM_GPU_DEPS (default build-gpu-deps), BUILD (default build-gpu), CUDA_ARCHS (default
# 90), BENCH_ARGS (extra flags for both benchmarks, e.g. "--batch 2"), SKIP_PEER=1, SKIP_BENCH=1, SKIP_DISPATCH=1,
# BUILD_CUDA (--pack: a CUDA build to take the bundle's binaries from instead of building build-cuda-port),
# TEST_TIMEOUT (test_cuda's limit in seconds, default 170), WAIT_BUILD=0 (don't wait for the background build),
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
  # The prebuilt binaries (scripts/gpu_dispatch_bundle.sh): the whole library for any AVX-512 x86-64
  # (the GPU machine's processor is not this one) and sm_90, unless BUILD_CUDA names a build to take.
  BC="${BUILD_CUDA:-$ROOT/build-cuda-port}"
  if [[ -z "${BUILD_CUDA:-}" ]]; then
    LAUNCHER=()
    command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    cmake -S "$ROOT" -B "$BC" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGADLM_CUDA=ON -DMEGADLM_NATIVE=OFF \
      -DCMAKE_CXX_FLAGS="-march=x86-64-v4" -DCMAKE_CUDA_COMPILER="${NVCC:-/usr/local/cuda/bin/nvcc}" \
      -DMEGADLM_CUDA_ARCHS=90 "${LAUNCHER[@]}" >/dev/null \
      && ninja -C "$BC" test_cuda pretrain_difflm preprocess_data bench_dlm_step bench_grouped_gemm \
      || { echo "gpu_check.sh --pack: the portable build failed" >&2; exit 1; }
  fi
  "$ROOT/scripts/gpu_dispatch_bundle.sh" pack "$BC" \
    || echo "gpu_check.sh --pack: no dispatch bundle: the GPU run will build and skip the model checks" >&2
  echo "packed $(du -sh "$DEPS" | cut -f1) into $DEPS (carry it: it is git-ignored)"
  exit 0
fi

export PATH="/usr/local/cuda/bin:$PATH"
LOGS="${OUT:-$BUILD/logs}"
mkdir -p "$BUILD" "$LOGS"
stamp "device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader || echo "nvidia-smi failed"
nvcc --version | tail -1
grep -m1 "model name" /proc/cpuinfo; echo "cores: $(nproc), glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"

# NCCL: the toolkit's, or the nvidia-nccl wheel PyTorch depends on.
if [[ -z "${NCCL_ROOT:-}" ]]; then
  NCCL_ROOT=$(python3 - <<'PY2' 2>/dev/null || true
import os, nvidia  # the nvidia-* wheels PyTorch depends on; nccl.h sits in <root>/include
for base in nvidia.__path__:
    for root, _, files in os.walk(base):
        if "nccl.h" in files:
            print(os.path.dirname(root))
            raise SystemExit
PY2
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

# The stand-alone build, in the background (its own log): what runs below when the bundle's binaries don't.
stamp "configure + build in the background ($BUILD, sm_$ARCHS; log $LOGS/build.log)"
GTEST_ARG=()
[[ -f "$DEPS/googletest/CMakeLists.txt" ]] && GTEST_ARG=(-DGTEST_SOURCE_DIR="$DEPS/googletest")
( cmake -S "$ROOT/bench/cuda" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEGADLM_CUDA_ARCHS="$ARCHS" \
    "${GTEST_ARG[@]}" "${FE_ARG[@]}" && nice -n 10 ninja -C "$BUILD" test_cuda bench_dlm_step bench_grouped_gemm ) \
    >"$LOGS/build.log" 2>&1 &
build_pid=$!
wait_build() {  # waits for the background build once; 0 when it built
  if [[ -z "${build_rc:-}" ]]; then
    wait "$build_pid"; build_rc=$?
    stamp "stand-alone build exit code: $build_rc"
    grep -i "nccl\|cudnn" "$LOGS/build.log" | grep -v "^\[" | head -5
    [[ $build_rc == 0 ]] || tail -40 "$LOGS/build.log"
  fi
  return "$build_rc"
}

# The bundle's binaries, when they load and start here.
TEST_BIN="" BENCH_BIN="" PREBUILT=0
if BUILD="$BUILD" "$ROOT/scripts/gpu_dispatch_bundle.sh" unpack; then
  D="$BUILD/dispatch-run/dispatch"
  source "$D/env.sh"
  if "$D/bin/test_cuda" --gtest_list_tests >/dev/null 2>"$LOGS/prebuilt_probe.log" && [[ -x "$D/bin/bench_dlm_step" ]]; then
    TEST_BIN="$D/bin/test_cuda" BENCH_BIN="$D/bin/bench_dlm_step" PREBUILT=1
    echo "using the bundle's prebuilt test_cuda and bench_dlm_step"
  else
    echo "the bundle's binaries do not start here:"; head -5 "$LOGS/prebuilt_probe.log"
  fi
fi
if [[ $PREBUILT == 0 ]]; then
  wait_build || { echo "FAIL: build"; exit 1; }
  TEST_BIN="$BUILD/test_cuda" BENCH_BIN="$BUILD/bench_dlm_step"
fi

stamp "test_cuda, one process per suite (a crash or a sticky CUDA error stays in its suite)"
# cuDNN builds (and run-time compiles) a graph per shape. TEST_TIMEOUT bounds all suites together.
test_rc=0
deadline=$(( $(date +%s) + ${TEST_TIMEOUT:-170} ))
: >"$LOGS/test_cuda.log"
for suite in $("$TEST_BIN" --gtest_list_tests | grep -E "^[A-Za-z_][A-Za-z0-9_/]*\.( |$)" | cut -d. -f1 | sort -u); do
  left=$(( deadline - $(date +%s) ))
  (( left > 5 )) || { echo "test_cuda: out of time before $suite"; test_rc=1; break; }
  s0=$(date +%s)
  timeout "$left" "$TEST_BIN" --gtest_filter="$suite.*" >>"$LOGS/test_cuda.log" 2>&1
  r=$?
  printf "  %-28s exit %3d  %3d s  %s\n" "$suite" "$r" "$(( $(date +%s) - s0 ))" "$([[ $r == 0 ]] && echo ok || echo FAIL)"
  [[ $r == 0 ]] || test_rc=1
done
if [[ $test_rc != 0 ]]; then
  grep -a "^\[  FAILED  \] [A-Za-z]" "$LOGS/test_cuda.log" | sort -u | head -40
  echo "first failures ($LOGS/test_cuda.log has all):"
  grep -a -A8 "Failure$\|terminate called\|what():\|Segmentation\|Aborted\|illegal\|CUDA error" "$LOGS/test_cuda.log" | head -80
fi
echo "test_cuda exit code: $test_rc"

if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
  stamp "bench_dlm_step (MegaDLMs CUDA)"
  # shellcheck disable=SC2086
  timeout 120 "$BENCH_BIN" --steps 8 --warmup 2 $BENCH_ARGS 2>&1 | tee "$LOGS/bench.log"
fi
if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
  stamp "bench_grouped_gemm (MoE experts: grouped products vs the per-expert loop, 8 and 16 experts)"
  GROUPED_BIN="$BUILD/bench_grouped_gemm"
  if [[ $PREBUILT == 1 && -x "$D/bin/bench_grouped_gemm" ]]; then GROUPED_BIN="$D/bin/bench_grouped_gemm"
  elif [[ $PREBUILT == 1 ]]; then wait_build || true; fi
  timeout 90 "$GROUPED_BIN" --reps 10 2>&1 | tee "$LOGS/grouped.log"
fi
if [[ "${SKIP_PEER:-0}" != 1 ]]; then
  stamp "PyTorch peer (SDPA flash, torch.compile)"
  # shellcheck disable=SC2086
  timeout 210 python3 "$ROOT/tools/reference/gpu_peer_dlm.py" --steps 8 --warmup 2 $BENCH_ARGS 2>&1 \
    | grep -v "^ *warnings.warn" | tee "$LOGS/peer.log" | tail -12
fi
if [[ "${SKIP_DISPATCH:-0}" != 1 && $PREBUILT == 1 ]]; then
  stamp "pretrain_difflm --device cuda (prebuilt bundle)"
  BUILD="$BUILD" "$ROOT/scripts/gpu_dispatch_bundle.sh" smoke 2>&1 | tee "$LOGS/smoke.log"
  smoke_rc=${PIPESTATUS[0]}
  echo "pretrain_difflm smoke exit code: $smoke_rc"
  [[ $test_rc == 0 ]] && test_rc=$smoke_rc
fi

stamp "summary"
grep -h "^RESULT" "$LOGS/bench.log" "$LOGS/peer.log" 2>/dev/null
ours=$(grep -ho "RESULT megadlm_cuda: .* \([0-9]*\) tokens/s" "$LOGS/bench.log" 2>/dev/null | grep -o "[0-9]* tokens/s" | cut -d' ' -f1)
peer=$(grep -ho "[0-9]* tokens/s" "$LOGS/peer.log" 2>/dev/null | tail -1 | cut -d' ' -f1)
if [[ -n "$ours" && -n "$peer" && "$peer" -gt 0 ]]; then
  awk -v a="$ours" -v b="$peer" 'BEGIN { printf "MegaDLMs / PyTorch tokens/s: %.2fx (target >= 1.3x)\n", a / b }'
fi
if [[ $PREBUILT == 1 && "${WAIT_BUILD:-1}" == 1 ]]; then
  wait_build && timeout 60 "$BUILD/test_cuda" --gtest_brief=1 --gtest_filter='CudaGemm*:CudaOps*' 2>&1 | tail -3
fi
stamp "done (test_cuda exit $test_rc)"
exit "$test_rc"
