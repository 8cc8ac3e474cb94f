// Matrix products through cuBLASLt, row-major as kernels/cpu/gemm.h.
//
// cuBLASLt is column-major. A row-major [R, S] matrix with leading dimension ld is, read column-major, its
// transpose [S, R] with the same ld, so the row-major product C = op(A) op(B) is computed as the
// column-major product C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" is our A, with m = N,
// n = M, and each operand transposed exactly when ours is. A bias of length m is then our bias over the
// N output columns, which is what a Linear layer needs.
//
// One handle, one 32 MiB workspace and an algorithm cache keyed by everything but the pointer values
// (their 16-byte alignment is part of the key: cuBLASLt's heuristics depend on it). Products on the
// same process share the workspace, so they must be issued on one stream at a time.
//
// The algorithm of a new key: cuBLASLt's heuristic ranks up to kCandidates; the first that cublasLtMatmul
// accepts is kept (a ranked algorithm can still be refused with NOT_SUPPORTED, e.g. for some fp8 products).
// The candidates are not timed on first use: for the step benchmark's shapes that gains nothing over the
// ranking's first accepted one (docs/bench/decisions.md).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "core/error.h"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr int kCandidates = 8;

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt ", what, " failed with status ", static_cast<int>(st));
}

struct LtState {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  int device = -1;
  std::map<std::string, cublasLtMatmulAlgo_t> algos;
};

LtState& state() {
  static LtState s;
  return s;
}

cudaDataType_t cuda_type(DType t, const char* which) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    case DType::F8E4M3: return CUDA_R_8F_E4M3;
    case DType::F8E5M2: return CUDA_R_8F_E5M2;
    default: fail("cuda gemm: ", which, " has unsupported type ", dtype_name(t));
  }
}

bool is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }

cublasLtEpilogue_t lt_epilogue(const GemmArgs& g) {
  switch (g.epilogue) {
    case Epilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::Gelu: return g.aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_GELU;
    case Epilogue::BiasGelu: return g.aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
    case Epilogue::DGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

void validate(const GemmArgs& g) {
  MEGADLM_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0, "cuda gemm: negative shape M=", g.M, " N=", g.N, " K=", g.K);
  MEGADLM_CHECK(g.c_type == DType::F32 || g.c_type == DType::BF16, "cuda gemm: output type ", dtype_name(g.c_type),
                " (want float32 or bfloat16)");
  MEGADLM_CHECK(is_fp8(g.a_type) == is_fp8(g.b_type), "cuda gemm: A is ", dtype_name(g.a_type), " but B is ",
                dtype_name(g.b_type), " (fp8 needs both)");
  if (!is_fp8(g.a_type))
    MEGADLM_CHECK(g.a_type == g.b_type, "cuda gemm: A is ", dtype_name(g.a_type), " but B is ", dtype_name(g.b_type));
  if (g.a_type == DType::F32)
    MEGADLM_CHECK(g.c_type == DType::F32, "cuda gemm: float32 inputs need a float32 output, got ", dtype_name(g.c_type));
  if (is_fp8(g.a_type)) {
    MEGADLM_CHECK(!(g.a_type == DType::F8E5M2 && g.b_type == DType::F8E5M2), "cuda gemm: e5m2 x e5m2 is not supported");
    MEGADLM_CHECK(!g.trans_a && g.trans_b, "cuda gemm: fp8 products need trans_a = false and trans_b = true (C = A B^T)");
    MEGADLM_CHECK(compute_capability() >= 89, "cuda gemm: fp8 needs sm_89 or newer, this device is sm_",
                  compute_capability());
    MEGADLM_CHECK(g.epilogue == Epilogue::None || g.epilogue == Epilogue::Bias,
                  "cuda gemm: fp8 products support only the None and Bias epilogues");
  }
  const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  MEGADLM_CHECK(g.lda >= a_cols && g.ldb >= b_cols && g.ldc >= g.N, "cuda gemm: leading dimensions lda=", g.lda,
                " ldb=", g.ldb, " ldc=", g.ldc, " too small for A [", a_rows, ",", a_cols, "], B [", b_rows, ",", b_cols,
                "], C [", g.M, ",", g.N, "]");
  const bool needs_bias = g.epilogue == Epilogue::Bias || g.epilogue == Epilogue::BiasGelu;
  MEGADLM_CHECK(!needs_bias || g.bias, "cuda gemm: the bias epilogue needs a bias pointer");
  MEGADLM_CHECK(g.epilogue != Epilogue::DGelu || g.aux, "cuda gemm: the DGelu epilogue needs aux (the pre-activation)");
  MEGADLM_CHECK(g.batch >= 1, "cuda gemm: batch ", g.batch, " must be >= 1");
  MEGADLM_CHECK(!g.D || g.D != g.C, "cuda gemm: D aliases C (leave D null for an in-place product)");
}

int align_class(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return u % 256 == 0 ? 256 : (u % 16 == 0 ? 16 : (u % 4 == 0 ? 4 : 1));
}

std::string cache_key(const GemmArgs& g) {
  std::string k;
  auto add = [&](int64_t v) { k += std::to_string(v) + ","; };
  add(g.trans_a), add(g.trans_b), add(g.M), add(g.N), add(g.K), add(g.lda), add(g.ldb), add(g.ldc);
  add(static_cast<int>(g.a_type)), add(static_cast<int>(g.b_type)), add(static_cast<int>(g.c_type)), add(g.tf32);
  add(static_cast<int>(g.epilogue)), add(g.beta != 0.0f), add(g.batch), add(g.stride_a), add(g.stride_b),
      add(g.stride_c);
  add(align_class(g.A)), add(align_class(g.B)), add(align_class(g.C)), add(align_class(g.bias)),
      add(align_class(g.aux));
  add(g.bias != nullptr), add(g.aux != nullptr);  // GELU with and without aux are different epilogues
  add(g.D != nullptr), add(align_class(g.D));      // out of place
  return k;
}

// RAII for the cuBLASLt descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename V>
void set_op(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v, const char* what) {
  lt_check(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), what);
}

void set_batch(cublasLtMatrixLayout_t l, int64_t batch, int64_t stride) {
  if (batch == 1) return;
  const int32_t count = static_cast<int32_t>(batch);
  lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
           "layout batch count");
  lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
           "layout batch stride");
}

}  // namespace

void gemm(const GemmArgs& g, cudaStream_t stream) {
  validate(g);
  if (g.M == 0 || g.N == 0) return;
  LtState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) fail("cuda gemm: cudaGetDevice failed (no GPU?)");
  if (!s.handle) {
    lt_check(cublasLtCreate(&s.handle), "create");
    if (cudaMalloc(&s.workspace, kWorkspaceBytes) != cudaSuccess) fail("cuda gemm: cannot allocate the workspace");
    s.device = device;
  }
  MEGADLM_CHECK(device == s.device, "cuda gemm: the cuBLASLt state lives on device ", s.device, ", called on ", device);

  Descs d;
  const bool fp8 = is_fp8(g.a_type);
  const cublasComputeType_t compute =
      (g.a_type == DType::F32 && g.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  lt_check(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F), "matmul desc");
  // Column-major operands: lt A = our B, lt B = our A (see the top of the file).
  const cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_op(d.op, CUBLASLT_MATMUL_DESC_TRANSA, ta, "transa");
  set_op(d.op, CUBLASLT_MATMUL_DESC_TRANSB, tb, "transb");
  const cublasLtEpilogue_t epi = lt_epilogue(g);
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi, "epilogue");
  if (g.bias) {
    set_op(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, "bias pointer");
    const cudaDataType_t bt = cuda_type(g.c_type, "bias");
    set_op(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt, "bias type");
  }
  if (g.aux) {
    set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux, "aux pointer");
    const int64_t aux_ld = g.ldc;
    set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld, "aux ld");
    if (g.batch > 1) set_op(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, g.stride_c, "aux batch stride");
  }
  if (fp8) {
    if (g.b_scale) set_op(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.b_scale, "A scale");
    if (g.a_scale) set_op(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.a_scale, "B scale");
  }

  const cudaDataType_t at = cuda_type(g.b_type, "B"), bt = cuda_type(g.a_type, "A"), ct = cuda_type(g.c_type, "C");
  lt_check(cublasLtMatrixLayoutCreate(&d.a, at, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb), "layout A");
  lt_check(cublasLtMatrixLayoutCreate(&d.b, bt, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda), "layout B");
  lt_check(cublasLtMatrixLayoutCreate(&d.c, ct, g.N, g.M, g.ldc), "layout C");
  set_batch(d.a, g.batch, g.stride_b);
  set_batch(d.b, g.batch, g.stride_a);
  set_batch(d.c, g.batch, g.stride_c);

  const float alpha = g.alpha, beta = g.beta;
  auto matmul = [&](const cublasLtMatmulAlgo_t* algo) {
    return cublasLtMatmul(s.handle, d.op, &alpha, g.B, d.a, g.A, d.b, &beta, g.C, d.c, g.D ? g.D : g.C, d.c, algo,
                          s.workspace, kWorkspaceBytes, stream);
  };
  const std::string key = cache_key(g);
  auto it = s.algos.find(key);
  if (it != s.algos.end()) {
    lt_check(matmul(&it->second), "matmul");
    return;
  }
  lt_check(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
  const size_t ws = kWorkspaceBytes;
  lt_check(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
           "preference workspace");
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  lt_check(cublasLtMatmulAlgoGetHeuristic(s.handle, d.op, d.a, d.b, d.c, d.c, d.pref, kCandidates, results, &found),
           "algorithm heuristic");
  auto describe = [&] {
    return detail::concat("M=", g.M, " N=", g.N, " K=", g.K, " A ", dtype_name(g.a_type), " B ", dtype_name(g.b_type),
                          " C ", dtype_name(g.c_type), " epilogue ", static_cast<int>(g.epilogue));
  };
  MEGADLM_CHECK(found > 0, "cuda gemm: cuBLASLt has no algorithm for ", describe());
  // The first ranked candidate cublasLtMatmul accepts; the call itself is the product.
  std::string refused;
  for (int i = 0; i < found; ++i) {
    const cublasStatus_t st = matmul(&results[i].algo);
    if (st == CUBLAS_STATUS_SUCCESS) {
      s.algos.emplace(key, results[i].algo);
      return;
    }
    refused += detail::concat(" ", static_cast<int>(st));
  }
  fail("cuda gemm: cuBLASLt refused all ", found, " ranked algorithms for ", describe(), " (statuses", refused, ")");
}

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
  g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
  gemm(g, stream);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A, int64_t lda,
               const bf16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
  g.a_type = g.b_type = DType::BF16;
  g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
  gemm(g, stream);
}

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                  float beta, float* C, int64_t ldc, int64_t stride_c, cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = trans_a, g.trans_b = trans_b, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
  g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
  g.batch = batch, g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
  gemm(g, stream);
}

}  // namespace megadlm::cuda
