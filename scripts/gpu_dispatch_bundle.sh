#!/usr/bin/env bash
# The model-level GPU checks (the nn/ modules on the CUDA backend, pretrain_difflm --device cuda) need the
# whole library, whose CPU side links oneDNN, MPI, zlib and SentencePiece: absent from the lent GPU
# machine, which has only the CUDA toolkit, a compiler and PyTorch. So they are built HERE and carried
# there as a bundle: test_cuda (every suite), pretrain_difflm, bench_dlm_step and bench_grouped_gemm, the non-CUDA shared
# libraries they load (libc itself excepted) and a tiny packed dataset.
#
#   scripts/gpu_dispatch_bundle.sh pack [BUILD_CUDA]   here: writes build-gpu-deps/dispatch.tar.xz (~17 MB)
#                                                      from BUILD_CUDA (default build-cuda; gpu_check.sh
#                                                      --pack builds build-cuda-port: x86-64-v4, sm_90)
#   scripts/gpu_dispatch_bundle.sh unpack              on the GPU machine: unpacks it into
#                                                      $BUILD/dispatch-run and writes env.sh there
#                                                      (LD_LIBRARY_PATH); exit 1 when there is no bundle
#   scripts/gpu_dispatch_bundle.sh smoke               a few pretrain_difflm --device cuda steps, 3 models
#   scripts/gpu_dispatch_bundle.sh run                 unpack, test_cuda's CudaModel.* / CudaTrainer.*, smoke
# The CUDA libraries (cudart, cuBLASLt, cuDNN, NCCL, NVRTC) are the GPU machine's: the toolkit's, or the
# PyTorch wheels' (CUDNN_ROOT / NCCL_ROOT, as gpu_check.sh finds them).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEPS="${MEGADLM_GPU_DEPS:-$ROOT/build-gpu-deps}"
BUNDLE="$DEPS/dispatch.tar.xz"
cmd="${1:-}"

if [[ "$cmd" == pack ]]; then
  BC="${2:-$ROOT/build-cuda}"
  for b in tests/test_cuda bin/pretrain_difflm bin/preprocess_data bench/bench_dlm_step; do
    [[ -x "$BC/$b" ]] || { echo "gpu_dispatch_bundle.sh: $BC/$b missing: run scripts/build_cuda.sh first" >&2; exit 1; }
  done
  stage=$(mktemp -d)
  mkdir -p "$stage/dispatch/bin" "$stage/dispatch/lib" "$stage/dispatch/data"
  cp "$BC/tests/test_cuda" "$BC/bin/pretrain_difflm" "$BC/bench/bench_dlm_step" "$stage/dispatch/bin/"
  # The grouped-products benchmark, when the build has it (gpu_check.sh runs it).
  [[ -x "$BC/bench/bench_grouped_gemm" ]] && cp "$BC/bench/bench_grouped_gemm" "$stage/dispatch/bin/"
  # Every resolved library except glibc's own and the CUDA ones (the GPU machine's must match its driver).
  ldd "$BC/tests/test_cuda" "$BC/bin/pretrain_difflm" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*) ;;
      libcuda.so*|libcudart*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) ;;
      *) cp -L "$lib" "$stage/dispatch/lib/" ;;
    esac
  done
  # A tiny corpus, byte-tokenised: 3000 short documents of counting words.
  python3 - "$stage/dispatch/data/smoke.jsonl" <<'PY'
import json, sys
words = "zero one two three four five six seven eight nine".split()
with open(sys.argv[1], "w") as f:
    for d in range(3000):
        f.write(json.dumps({"text": " ".join(words[(d + i) % 10] for i in range(20 + d % 40))}) + "\n")
PY
  "$BC/bin/preprocess_data" --input "$stage/dispatch/data/smoke.jsonl" --output-prefix "$stage/dispatch/data/smoke" \
    --tokenizer-type ByteTokenizer --append-eod --log-interval 0 >/dev/null || { echo "preprocess_data failed" >&2; exit 1; }
  rm "$stage/dispatch/data/smoke.jsonl"
  mkdir -p "$DEPS"
  tar -C "$stage" -cJf "$BUNDLE" dispatch && rm -rf "$stage"
  echo "packed $(du -h "$BUNDLE" | cut -f1) into $BUNDLE (carried with build-gpu-deps)"
  exit 0
fi

case "$cmd" in unpack|smoke|run) ;; *) echo "usage: gpu_dispatch_bundle.sh pack [BUILD_CUDA] | unpack | smoke | run" >&2; exit 2 ;; esac
OUT_DIR="${BUILD:-$ROOT/build-gpu}/dispatch-run"
D="$OUT_DIR/dispatch"

unpack() {
  [[ -f "$BUNDLE" ]] || { echo "gpu_dispatch_bundle.sh: no $BUNDLE (pack it on the build machine); prebuilt binaries skipped"; return 1; }
  rm -rf "$OUT_DIR" && mkdir -p "$OUT_DIR" && tar -C "$OUT_DIR" -xJf "$BUNDLE" || return 1
  local libs="$D/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib"
  for r in "${CUDNN_ROOT:-}" "${NCCL_ROOT:-}"; do [[ -n "$r" ]] && libs="$libs:$r/lib"; done
  # NVRTC / cuBLAS / cuDNN / NCCL may also come only from PyTorch's wheels.
  for sub in cuda_nvrtc cublas cuda_runtime cudnn nccl; do
    local p
    p=$(python3 -c "import importlib.util as u; s = u.find_spec('nvidia.$sub'); print(list(s.submodule_search_locations)[0] if s else '')" 2>/dev/null || true)
    [[ -n "$p" ]] && libs="$libs:$p/lib"
  done
  echo "export LD_LIBRARY_PATH=\"$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\"" >"$D/env.sh"
  # shellcheck disable=SC1091
  source "$D/env.sh"
  if ldd "$D/bin/test_cuda" "$D/bin/pretrain_difflm" "$D/bin/bench_dlm_step" | grep -q "not found"; then
    echo "gpu_dispatch_bundle.sh: unresolved libraries:"
    ldd "$D/bin/test_cuda" "$D/bin/pretrain_difflm" "$D/bin/bench_dlm_step" | grep "not found" | sort -u
    return 1
  fi
  return 0
}

rc=0
smoke() {  # a few pretrain_difflm --device cuda steps; the last log lines
  local name=$1; shift
  echo "== pretrain_difflm --device cuda: $name"
  timeout 60 "$D/bin/pretrain_difflm" --device cuda --data-path "$D/data/smoke_text_document" \
    --tokenizer-type ByteTokenizer --num-layers 4 --hidden-size 256 --num-heads 4 --seq-length 256 \
    --max-position-embeddings 256 --micro-batch-size 8 --global-batch-size 16 --train-iters 30 --lr 1e-3 \
    --lr-warmup-iters 5 --log-interval 10 --eval-interval 30 --eval-iters 2 --seed 7 \
    --data-cache-path "$OUT_DIR/cache" --save "$OUT_DIR/ckpt_$name" "$@" 2>&1 | tail -6
  local r=${PIPESTATUS[0]}
  echo "smoke $name exit code: $r"
  [[ $r == 0 ]] || rc=1
}
smokes() {
  smoke gpt2_ar_fp32 --model-type gpt
  smoke gpt2_dlm_bf16 --model-type difflm --bf16
  smoke llama_dlm_fp32 --model-type difflm --normalization RMSNorm --swiglu --position-embedding-type rope \
    --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --qk-layernorm
}

case "$cmd" in
  unpack) unpack; exit $? ;;
  smoke)
    [[ -f "$D/env.sh" ]] || unpack || exit 0
    # shellcheck disable=SC1091
    source "$D/env.sh"
    smokes; exit "$rc" ;;
  run)
    unpack || exit 0
    echo "== CPU vs CUDA models (test_cuda CudaModel.* CudaTrainer.*)"
    timeout 150 "$D/bin/test_cuda" --gtest_filter='CudaModel.*:CudaTrainer.*' --gtest_brief=1 2>&1 | grep -v "^\[20" | tail -40
    rc=${PIPESTATUS[0]}
    echo "model tests exit code: $rc"
    smokes; exit "$rc" ;;
esac
