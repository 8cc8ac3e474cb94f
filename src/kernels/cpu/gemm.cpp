// Matrix products through oneDNN.
//
// fp32 single products go to dnnl_sgemm, oneDNN's BLAS-style entry point: it picks its JIT kernels by
// the CPU's ISA and needs no setup per shape. bf16 products and batched products go through the matmul
// primitive, whose creation (descriptor checks, JIT code generation) costs far more than a small product,
// so created primitives are kept in a cache keyed by everything baked into them: element type, shapes,
// strides, and whether alpha is 1 and beta is 0. alpha's value is a run-time output scale, so one cached
// primitive serves every alpha. beta is handled outside the primitive: C is scaled by beta first when beta
// is neither 0 nor 1, and the primitive then either overwrites C (beta == 0, C is never read) or adds to it
// with a sum post-op of scale 1.
//
// Which bf16 matmul: oneDNN lists its brgemm implementation first, but on a CPU with AVX512-BF16 and no
// AMX its gemm-based matmul ("gemm:jit") is faster on every product of our models, most of all on the
// output layer's weight gradient, whose reduction runs over a chunk of a few hundred rows (compare
// `bench_kernels gemm` with MEGADLM_BF16_MATMUL=brgemm and without; docs/bench/decisions.md).
// brgemm in this oneDNN takes no run-time output scale, so a primitive that carries one is the
// gemm-based matmul; that is how it is chosen. With AMX, brgemm's AMX kernels stay, and so does brgemm
// for a bf16 output (the gemm-based matmul accumulates a bf16 output in an fp32 copy of the whole of
// it: 256 MiB for a chunk of logits).
// MEGADLM_BF16_MATMUL=auto|brgemm|gemm overrides the choice for fp32 outputs (auto by default); the
// choice is fixed per process, so results do not vary run to run.
//
// Degenerate products follow BLAS: M == 0 or N == 0 touches nothing; K == 0 or alpha == 0 gives
// C = beta * C without reading A or B (beta == 0 writes zeros, whatever C held).
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"

namespace megadlm::cpu {

namespace {

// ---- argument checks -----------------------------------------------------------------------------

// Leading dimensions are row strides of the matrices as stored (row-major), so each must cover the
// stored row length; oneDNN would otherwise read out of bounds or report a bare status code.
void check_gemm_args(const char* who, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     int64_t lda, int64_t ldb, int64_t ldc) {
  MEGADLM_CHECK(M >= 0 && N >= 0 && K >= 0, who, ": negative size (M=", M, ", N=", N, ", K=", K, ")");
  const int64_t a_cols = trans_a ? M : K;  // A stored [K,M] when transposed, else [M,K]
  const int64_t b_cols = trans_b ? K : N;  // B stored [N,K] when transposed, else [K,N]
  MEGADLM_CHECK(lda >= std::max<int64_t>(1, a_cols), who, ": lda=", lda, " is smaller than the ", a_cols,
                " columns of A as stored (trans_a=", trans_a, ")");
  MEGADLM_CHECK(ldb >= std::max<int64_t>(1, b_cols), who, ": ldb=", ldb, " is smaller than the ", b_cols,
                " columns of B as stored (trans_b=", trans_b, ")");
  MEGADLM_CHECK(ldc >= std::max<int64_t>(1, N), who, ": ldc=", ldc, " is smaller than N=", N);
}

// C [M,N] (row stride ldc) = beta * C. beta == 0 writes zeros without reading, so NaN in C is cleared.
void scale_matrix(float* C, int64_t M, int64_t N, int64_t ldc, float beta) {
  if (beta == 1.0f || M == 0 || N == 0) return;
#pragma omp parallel for schedule(static) if (M * N > (1 << 16))
  for (int64_t i = 0; i < M; ++i) {
    float* row = C + i * ldc;
    if (beta == 0.0f) {
      for (int64_t j = 0; j < N; ++j) row[j] = 0.0f;
    } else {
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
    }
  }
}

// ---- the matmul primitive cache --------------------------------------------------------------------

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

enum class Elem : int64_t { F32 = 0, BF16 = 1 };

// One product family as oneDNN sees it: batch of op(A)[M,K] @ op(B)[K,N] -> C[M,N] with explicit
// strides for every dimension (a transpose is just swapped strides). A batch stride of 0 on A or B means
// the matrix is shared by every batch entry (broadcast).
struct MatmulShape {
  Elem elem;
  Elem out = Elem::F32;  // C's element type
  int64_t batch, M, N, K;
  int64_t a_sb, a_sm, a_sk;  // strides of A over (batch, m, k)
  int64_t b_sb, b_sk, b_sn;  // strides of B over (batch, k, n)
  int64_t c_sb, c_sm;        // strides of C over (batch, m); n is contiguous
  bool scaled;               // alpha != 1: a run-time output scale
  bool accumulate;           // beta != 0: a sum post-op adds the product to C
  std::array<int64_t, 16> key() const {
    return {static_cast<int64_t>(elem), batch, M, N, K, a_sb, a_sm, a_sk, b_sb, b_sk, b_sn, c_sb, c_sm,
            scaled, accumulate, static_cast<int64_t>(out)};
  }
};

// An empty primitive records that oneDNN has no implementation for the shape (for instance bf16 on a
// CPU without AVX-512), so that the caller falls back to a plain path without asking again.
struct CachedMatmul {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md;  // fixed layouts (no format_tag::any), so user memory fits as is
  bool ok = false;
  bool scaled = false;  // takes alpha as a run-time output scale (also when alpha == 1: see the top)
};

enum class Bf16Matmul { Auto, Brgemm, Gemm };

Bf16Matmul bf16_matmul_choice() {
  static const Bf16Matmul choice = [] {
    const char* env = std::getenv("MEGADLM_BF16_MATMUL");
    const std::string v = env ? env : "";
    if (v.empty() || v == "auto") return Bf16Matmul::Auto;
    if (v == "brgemm") return Bf16Matmul::Brgemm;
    if (v == "gemm") return Bf16Matmul::Gemm;
    fail("MEGADLM_BF16_MATMUL: expected auto, brgemm or gemm, got '", v, "'");
  }();
  return choice;
}

// A caller that varies shapes without end would grow the cache without end; past this many entries it
// is emptied and refilled (primitives in use are reference-counted, so this is safe).
constexpr size_t kMaxCached = 4096;

std::mutex g_cache_mutex;
std::map<std::array<int64_t, 16>, CachedMatmul> g_cache;

dnnl::memory::desc make_desc(dnnl::memory::data_type dt, bool batched, int64_t batch, int64_t rows,
                             int64_t cols, int64_t s_batch, int64_t s_row, int64_t s_col) {
  if (!batched) return dnnl::memory::desc({rows, cols}, dt, {s_row, s_col});
  // A zero batch stride is a broadcast: oneDNN expresses it as a batch dimension of size 1.
  if (s_batch == 0) return dnnl::memory::desc({1, rows, cols}, dt, {rows * cols, s_row, s_col});
  return dnnl::memory::desc({batch, rows, cols}, dt, {s_batch, s_row, s_col});
}

// Whether to swap the bf16 implementation oneDNN chose first (impl) for its gemm-based matmul.
bool prefer_gemm_based(const std::string& impl) {
  switch (bf16_matmul_choice()) {
    case Bf16Matmul::Brgemm: return false;
    case Bf16Matmul::Gemm: return true;
    case Bf16Matmul::Auto: break;
  }
  return impl.rfind("brg", 0) == 0 && impl.find("amx") == std::string::npos;
}

CachedMatmul create_matmul(const MatmulShape& s) {
  using dt = dnnl::memory::data_type;
  const dt in_dt = s.elem == Elem::BF16 ? dt::bf16 : dt::f32;
  const bool batched = s.batch > 1;
  const auto a_md = make_desc(in_dt, batched, s.batch, s.M, s.K, s.a_sb, s.a_sm, s.a_sk);
  const auto b_md = make_desc(in_dt, batched, s.batch, s.K, s.N, s.b_sb, s.b_sk, s.b_sn);
  const auto c_md = make_desc(s.out == Elem::BF16 ? dt::bf16 : dt::f32, batched, s.batch, s.M, s.N, s.c_sb, s.c_sm, 1);
  dnnl::primitive_attr attr;
  if (s.scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
  if (s.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  CachedMatmul out;
  out.a_md = a_md;
  out.b_md = b_md;
  out.c_md = c_md;
  out.scaled = s.scaled;
  try {
    const dnnl::matmul::desc desc(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    if (s.elem == Elem::BF16 && s.out == Elem::F32 && !s.scaled && prefer_gemm_based(pd.impl_info_str())) {
      // The same product with alpha as a run-time scale: oneDNN's gemm-based matmul (see the top).
      attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
      const dnnl::matmul::primitive_desc scaled_pd(desc, attr, cpu_engine());
      if (std::string(scaled_pd.impl_info_str()).rfind("gemm:", 0) == 0) {
        pd = scaled_pd;
        out.scaled = true;
      }
    }
    out.prim = dnnl::matmul(pd);
    out.ok = true;
  } catch (const dnnl::error&) {
    out.ok = false;  // unsupported here: the caller falls back
  }
  return out;
}

CachedMatmul get_matmul(const MatmulShape& s) {
  const auto key = s.key();
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  auto it = g_cache.find(key);
  if (it != g_cache.end()) return it->second;
  // Created under the lock: two threads asking for a new shape at once would otherwise both pay for it.
  CachedMatmul created = create_matmul(s);
  if (g_cache.size() >= kMaxCached) g_cache.clear();
  g_cache.emplace(key, created);
  return created;
}

// Runs a cached matmul. Returns false when oneDNN has no implementation for the shape. Assumes the
// degenerate cases (M, N, K == 0, alpha == 0) were handled and that C was already scaled by beta when
// beta is neither 0 nor 1.
bool run_matmul(const MatmulShape& s, const void* A, const void* B, void* C, float alpha) {
  const CachedMatmul cm = get_matmul(s);
  if (!cm.ok) return false;
  dnnl::engine& engine = cpu_engine();
  dnnl::memory a_mem(cm.a_md, engine, const_cast<void*>(A));
  dnnl::memory b_mem(cm.b_md, engine, const_cast<void*>(B));
  dnnl::memory c_mem(cm.c_md, engine, C);
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  float alpha_value = alpha;
  if (cm.scaled) {
    dnnl::memory scale_mem({{1}, dnnl::memory::data_type::f32, {1}}, engine, &alpha_value);
    args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, scale_mem);
  }
  // A stream per thread: a oneDNN CPU stream is cheap, and separate ones let threads run products
  // concurrently without sharing stream state.
  thread_local dnnl::stream stream(engine);
  cm.prim.execute(stream, args);
  stream.wait();
  return true;
}

MatmulShape make_shape(Elem elem, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                       float alpha, int64_t lda, int64_t stride_a, int64_t ldb, int64_t stride_b, float beta,
                       int64_t ldc, int64_t stride_c) {
  MatmulShape s{};
  s.elem = elem;
  s.batch = batch;
  s.M = M;
  s.N = N;
  s.K = K;
  // op(A)[m,k] sits at m*lda + k, or at k*lda + m when A is stored transposed; likewise for B.
  s.a_sb = stride_a;
  s.a_sm = trans_a ? 1 : lda;
  s.a_sk = trans_a ? lda : 1;
  s.b_sb = stride_b;
  s.b_sk = trans_b ? 1 : ldb;
  s.b_sn = trans_b ? ldb : 1;
  s.c_sb = stride_c;
  s.c_sm = ldc;
  s.scaled = alpha != 1.0f;
  s.accumulate = beta != 0.0f;
  return s;
}

}  // namespace

// ---- fp32 ---------------------------------------------------------------------------------------------

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_gemm_args("gemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    scale_matrix(C, M, N, ldc, beta);
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                      beta, C, ldc);
  MEGADLM_CHECK(st == dnnl_success, "gemm: dnnl_sgemm failed with status ", static_cast<int>(st), " (M=", M,
                ", N=", N, ", K=", K, ", lda=", lda, ", ldb=", ldb, ", ldc=", ldc, ")");
}

// ---- bf16 inputs, fp32 output ----------------------------------------------------------------------------

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_gemm_args("gemm_bf16", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    scale_matrix(C, M, N, ldc, beta);
    return;
  }
  if (beta != 0.0f) scale_matrix(C, M, N, ldc, beta);  // the primitive adds with scale 1
  const MatmulShape s =
      make_shape(Elem::BF16, trans_a, trans_b, 1, M, N, K, alpha, lda, 0, ldb, 0, beta, ldc, 0);
  if (run_matmul(s, A, B, C, alpha)) return;

  // No bf16 matmul on this CPU: widen the inputs (exactly: bf16 is the top half of an fp32) and use the
  // fp32 path, which gives the same fp32-accumulated result up to summation order.
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  std::vector<float> a32(a_rows * a_cols), b32(b_rows * b_cols);
#pragma omp parallel for schedule(static) if (a_rows * a_cols > (1 << 16))
  for (int64_t i = 0; i < a_rows; ++i)
    for (int64_t j = 0; j < a_cols; ++j) a32[i * a_cols + j] = bf16_to_f32(A[i * lda + j]);
#pragma omp parallel for schedule(static) if (b_rows * b_cols > (1 << 16))
  for (int64_t i = 0; i < b_rows; ++i)
    for (int64_t j = 0; j < b_cols; ++j) b32[i * b_cols + j] = bf16_to_f32(B[i * ldb + j]);
  gemm(trans_a, trans_b, M, N, K, alpha, a32.data(), a_cols, b32.data(), b_cols, beta == 0.0f ? 0.0f : 1.0f,
       C, ldc);
}

void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc) {
  check_gemm_args("gemm_bf16_to_bf16", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K > 0 && alpha != 0.0f) {
    // In slabs of kSlab rows: brgemm's bf16-output kernels run well below their speed on row counts off
    // their blocking (such as a diffusion step's 517 or 518 rows of logits); docs/bench/decisions.md.
    constexpr int64_t kSlab = 256;
    bool ran = true;
    for (int64_t r0 = 0; r0 < M && ran; r0 += kSlab) {
      const int64_t m = std::min(kSlab, M - r0);
      MatmulShape s = make_shape(Elem::BF16, trans_a, trans_b, 1, m, N, K, alpha, lda, 0, ldb, 0, 0.0f, ldc, 0);
      s.out = Elem::BF16;
      ran = run_matmul(s, trans_a ? A + r0 : A + r0 * lda, B, C + r0 * ldc, alpha);
    }
    if (ran) return;
  }
  // Degenerate, or no bf16 matmul here: the fp32 result, rounded.
  std::vector<float> c32(static_cast<size_t>(M * N));
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, c32.data(), N);
  for (int64_t i = 0; i < M; ++i) cast_f32_to_bf16(C + i * ldc, c32.data() + i * N, N);
}

void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc,
                       float* scratch, int64_t slab) {
  check_gemm_args("gemm_bf16_to_bf16", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  MEGADLM_CHECK(slab > 0 && scratch != nullptr, "gemm_bf16_to_bf16: a slab of ", slab, " columns needs a scratch");
  if (bf16_matmul_on_amx()) {  // the bf16-output product is the faster one there (gemm.h)
    gemm_bf16_to_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, C, ldc);
    return;
  }
  for (int64_t c0 = 0; c0 < N; c0 += slab) {
    const int64_t n = std::min(slab, N - c0);
    // Columns c0 .. c0 + n - 1 of op(B): rows of B when transposed, columns otherwise.
    const uint16_t* Bs = trans_b ? B + c0 * ldb : B + c0;
    gemm_bf16(trans_a, trans_b, M, n, K, alpha, A, lda, Bs, ldb, 0.0f, scratch, n);
    cast_f32_to_bf16_rows_ftz(C + c0, ldc, scratch, n, M, n);
  }
}

// ---- batched fp32 ---------------------------------------------------------------------------------------

void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                  float beta, float* C, int64_t ldc, int64_t stride_c) {
  check_gemm_args("gemm_batched", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  MEGADLM_CHECK(batch >= 0, "gemm_batched: negative batch ", batch);
  MEGADLM_CHECK(stride_a >= 0 && stride_b >= 0, "gemm_batched: negative batch stride (stride_a=", stride_a,
                ", stride_b=", stride_b, ")");
  // Distinct outputs must not share memory, or the products would race; shared inputs are fine. Outputs
  // may follow one another (stride_c past the last row) or interleave within rows, as heads do in a
  // [T, H, D] layout (stride_c = D, ldc = H*D).
  const bool stacked = stride_c >= (M - 1) * ldc + N;
  const bool interleaved = stride_c >= N && (batch - 1) * stride_c + N <= ldc;
  MEGADLM_CHECK(batch <= 1 || M == 0 || N == 0 || stacked || interleaved, "gemm_batched: stride_c=", stride_c,
                " makes the ", batch, " outputs of ", M, "x", N, " (ldc=", ldc, ") overlap");
  if (batch == 0 || M == 0 || N == 0) return;
  if (batch == 1) {
    gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (K == 0 || alpha == 0.0f || (beta != 0.0f && beta != 1.0f)) {
    for (int64_t b = 0; b < batch; ++b) scale_matrix(C + b * stride_c, M, N, ldc, beta);
    if (K == 0 || alpha == 0.0f) return;
  }
  // One batched primitive parallelises across the batch, which a loop of small products cannot do
  // (attention's per-head products are each too small to occupy every thread).
  const MatmulShape s = make_shape(Elem::F32, trans_a, trans_b, batch, M, N, K, alpha, lda, stride_a, ldb,
                                   stride_b, beta, ldc, stride_c);
  if (run_matmul(s, A, B, C, alpha)) return;
  for (int64_t b = 0; b < batch; ++b)
    gemm(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb,
         beta == 0.0f ? 0.0f : 1.0f, C + b * stride_c, ldc);
}

bool has_bf16_matmul() {
  static const bool has = [] {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({64, 64}, dt::bf16, {64, 1}), c({64, 64}, dt::f32, {64, 1});
    try {
      const dnnl::matmul::desc desc(a, a, c);
      const dnnl::matmul::primitive_desc pd(desc, cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

bool bf16_matmul_on_amx() {
  static const bool amx = [] {
    if (!has_bf16_matmul()) return false;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({256, 256}, dt::bf16, {256, 1}), c({256, 256}, dt::bf16, {256, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), cpu_engine());
    return std::string(pd.impl_info_str()).find("amx") != std::string::npos;
  }();
  return amx;
}

int64_t gemm_cache_size() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  return static_cast<int64_t>(g_cache.size());
}

}  // namespace megadlm::cpu
