// The CUDA backend: the ops of kernels/backend.h forwarded to kernels/cuda/ops.h on one stream (the
// legacy default stream, so that the synchronous copies of device.cpp order with the kernels without
// events). Compiled only with -DMEGADLM_CUDA=ON. Creating it registers the CUDA memory table of
// core/device_memory.h, through which Tensor and Arena allocate device memory, and (with NCCL) the
// device communicator factory of parallel/device_communicator.h.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/backend.h"
#include "kernels/cuda/ops.h"
#ifdef MEGADLM_HAVE_NCCL
#include "kernels/cuda/nccl_communicator.h"
#endif

namespace megadlm {
namespace {

constexpr cudaStream_t kStream = 0;

bf16_t* bf(uint16_t* p) { return reinterpret_cast<bf16_t*>(p); }
const bf16_t* bf(const uint16_t* p) { return reinterpret_cast<const bf16_t*>(p); }

void check(cudaError_t err, const char* what, size_t bytes) {
  if (err != cudaSuccess) fail(what, " of ", bytes, " bytes failed: ", cudaGetErrorString(err));
}

void memory_copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) {
  if (bytes == 0) return;
  const cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                            : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy", bytes);
}

void memory_zero(void* p, size_t bytes) { cuda::memset_device(p, 0, bytes); }

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    DeviceMemory m;
    m.device = Device::CUDA;
    m.alloc = cuda::device_alloc;
    m.free = cuda::device_free;
    m.zero = memory_zero;
    m.copy = memory_copy;
    register_device_memory(m);
#ifdef MEGADLM_HAVE_NCCL
    cuda::register_nccl_communicator();  // the device communicators of the parallel groups
#endif
    scalar_ = static_cast<double*>(cuda::device_alloc(sizeof(double)));
    fp8_capable_ = cuda::compute_capability() >= 89;
  }
  // The backend lives until exit; its scalar is left to the driver's teardown (freeing it from a static
  // destructor after the CUDA runtime is gone would fail).

  Device device() const override { return Device::CUDA; }

  void copy_to_device(void* dst, const void* src, size_t bytes) const override {
    memory_copy(dst, true, src, false, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    memory_copy(dst, false, src, true, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) const override { memory_copy(dst, true, src, true, bytes); }
  void zero(void* dst, size_t bytes) const override { memory_zero(dst, bytes); }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) const override {
    cuda::copy_2d_device(dst, dst_pitch, src, src_pitch, width, rows, kStream);
  }
  void synchronize() const override { cuda::synchronize(); }

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc) const override {
    cuda::gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, kStream);
  }
  void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                 const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) const override {
    cuda::gemm_bf16(ta, tb, M, N, K, alpha, bf(A), lda, bf(B), ldb, beta, C, ldc, kStream);
  }
  // cuBLASLt's fp8 kernels (sm_89+) for the shapes they take: every dimension a multiple of 16 and the
  // operands 16-byte aligned (leading dimensions of 16 bytes at least). Any other shape, or a product
  // cuBLASLt refuses (logged once), multiplies the dequantised values in fp32 as the CPU does.
  void gemm_fp8(int64_t M, int64_t N, int64_t K, const uint8_t* A, bool a_e5m2, float a_scale, const uint8_t* B,
                bool b_e5m2, float b_scale, float beta, float* C) const override {
    if (fp8_products() && fp8_shape_ok(M, N, K, A, B, C) && !(a_e5m2 && b_e5m2) && !fp8_refused_) {
      // Per-tensor factors fold into alpha (a host scalar), so no device scalar has to be written
      // before each product: C = (a_scale b_scale) (A @ B^T) + beta C, the codes' products exact in fp32.
      cuda::GemmArgs g;
      g.trans_b = true, g.M = M, g.N = N, g.K = K, g.alpha = a_scale * b_scale, g.beta = beta;
      g.a_type = a_e5m2 ? DType::F8E5M2 : DType::F8E4M3;
      g.b_type = b_e5m2 ? DType::F8E5M2 : DType::F8E4M3;
      g.c_type = DType::F32;
      g.A = A, g.lda = K, g.B = B, g.ldb = K, g.C = C, g.ldc = N;
      try {
        cuda::gemm(g, kStream);
        return;
      } catch (const Error& e) {
        fp8_refused_ = true;
        log_info("cuda: cuBLASLt refused an fp8 product (", e.what(), "); fp8 products run dequantised in fp32 from now on");
      }
    }
    float* a = static_cast<float*>(cuda::device_alloc_async(sizeof(float) * static_cast<size_t>(M * K + N * K), kStream));
    float* b = a + M * K;
    cast_fp8_to_f32(a, A, M * K, a_scale, a_e5m2);
    cast_fp8_to_f32(b, B, N * K, b_scale, b_e5m2);
    cuda::gemm_f32(false, true, M, N, K, 1.0f, a, K, b, K, beta, C, N, kStream);
    cuda::device_free_async(a, kStream);
  }
  bool fp8_products() const override { return fp8_capable_; }
  void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                            const float* const* W, float* Y) const override {
    cuda::grouped_gemm_forward(G, offsets, N, K, X, W, Y, kStream);
  }
  void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* const* W, float* dX) const override {
    cuda::grouped_gemm_backward_data(G, offsets, N, K, dY, W, dX, kStream);
  }
  void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                    const float* X, float* const* dW) const override {
    cuda::grouped_gemm_backward_weight(G, offsets, N, K, dY, X, dW, kStream);
  }
  // The best of five timed square products (after one untimed): bf16 8192^3 with fp32 accumulation, or
  // exact fp32 4096^3 (no TF32: the products fp32 runs make), on inputs of 0.75 or so.
  double peak_gemm_flops(bool bf16) const override {
    static const double fp32_rate = time_square_gemm(false, 4096);
    if (!bf16) return fp32_rate;
    static const double bf16_rate = time_square_gemm(true, 8192);
    return bf16_rate;
  }
  void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C) const override {
    cuda::transpose_u8(out, in, R, C, kStream);
  }

  void gelu_forward(float* out, const float* inp, int64_t n) const override {
    cuda::gelu_forward<float>(out, inp, n, kStream);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    cuda::gelu_backward<float>(dinp, inp, dout, n, kStream);
  }
  void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) const override {
    cuda::swiglu_forward<float>(out, gate_up, N, F, kStream);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N, int64_t F) const override {
    cuda::swiglu_backward<float>(dgate_up, gate_up, dout, N, F, kStream);
  }
  void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) const override {
    cuda::bias_add_forward<float>(out, bias, N, C, kStream);
  }
  void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) const override {
    cuda::bias_backward<float>(dbias, dout, N, C, kStream);
  }
  void add_inplace(float* a, const float* b, int64_t n) const override { cuda::add_inplace<float>(a, b, n, kStream); }
  void moe_permute(float* rows, const float* x, const int32_t* token, const float* weight, int64_t P,
                   int64_t C) const override {
    cuda::moe_permute<float>(rows, x, token, weight, P, C, kStream);
  }
  void moe_unpermute(float* out, const float* rows, const int32_t* offsets, const int32_t* list, const float* weight,
                     int64_t N, int64_t C) const override {
    cuda::moe_unpermute<float>(out, rows, offsets, list, weight, N, C, kStream);
  }
  void moe_unpermute_weight_grad(float* dweight, const float* dout, const float* rows, const int32_t* token, int64_t P,
                                 int64_t C) const override {
    cuda::moe_unpermute_weight_grad<float>(dweight, dout, rows, token, P, C, kStream);
  }
  void scale_inplace(float* a, float s, int64_t n) const override { cuda::scale_inplace<float>(a, s, n, kStream); }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C, float eps) const override {
    cuda::layernorm_forward<float>(out, mean, rstd, inp, weight, bias, N, C, eps, nullptr, nullptr, kStream);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N,
                          int64_t C) const override {
    cuda::layernorm_backward<float>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, nullptr, kStream);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                       float eps) const override {
    cuda::rmsnorm_forward<float>(out, rstd, inp, weight, N, C, eps, nullptr, nullptr, kStream);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) const override {
    cuda::rmsnorm_backward<float>(dinp, dweight, dout, inp, weight, rstd, N, C, nullptr, kStream);
  }

  void softmax_forward(float* out, const float* inp, int64_t N, int64_t V) const override {
    cuda::softmax_forward(out, inp, N, V, kStream);
  }
  void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V) const override {
    cuda::softmax_backward(din, out, dout, N, V, kStream);
  }

  void rope_forward(float* out, const float* inp, const int32_t* positions, const float* cos, const float* sin,
                    int64_t N, int64_t H, int64_t D) const override {
    cuda::rope_forward<float>(out, inp, positions, cos, sin, N, H, D, kStream);
  }
  void rope_backward(float* dinp, const float* dout, const int32_t* positions, const float* cos, const float* sin,
                     int64_t N, int64_t H, int64_t D) const override {
    cuda::rope_backward<float>(dinp, dout, positions, cos, sin, N, H, D, kStream);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                         const int32_t* positions, const float* wpe, int64_t N, int64_t C) const override {
    cuda::embedding_forward<float>(out, tokens, wte, vocab_start, V, positions, wpe, N, C, kStream);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t vocab_start,
                          int64_t V, const int32_t* positions, int64_t N, int64_t C) const override {
    cuda::embedding_backward<float>(dwte, dwpe, dout, tokens, vocab_start, V, positions, N, C, kStream);
  }

  // fp32 logits only (the output layer keeps fp32 logits on a device: bf16_logits() is false); a bf16
  // gradient is the fp32 one in dlogits, cast.
  static const float* device_logits(const CrossEntropyArgs& a, const char* op) {
    MEGADLM_CHECK(!a.logits_bf16, "cuda ", op, ": the device takes fp32 logits");
    MEGADLM_CHECK(a.dlogits_bf16 == nullptr || a.dlogits != nullptr, "cuda ", op,
                  ": a bf16 gradient is cast from the fp32 one, which needs dlogits");
    MEGADLM_CHECK(a.losses != nullptr || a.N == 0, "cuda ", op, ": the sum needs the losses buffer");
    return static_cast<const float*>(a.logits);
  }
  double cross_entropy(const CrossEntropyArgs& a) const override {
    const float* logits = device_logits(a, "cross_entropy");
    cuda::cross_entropy_forward_backward<float>(a.losses, a.dlogits, logits, a.targets, a.weights, a.ignore_index,
                                                a.grad_scale, a.N, a.Vl, kStream);
    if (a.dlogits_bf16) cast_f32_to_bf16(a.dlogits_bf16, a.dlogits, a.N * a.Vl);
    cuda::sum(scalar_, a.losses, a.N, kStream);
    return download_scalar();
  }
  void cross_entropy_shard_max(float* row_max, const CrossEntropyArgs& a) const override {
    cuda::cross_entropy_shard_max(row_max, device_logits(a, "cross_entropy_shard_max"), a.targets, a.ignore_index,
                                  a.N, a.Vl, kStream);
  }
  void cross_entropy_shard_sumexp(double* stats, const float* row_max, const CrossEntropyArgs& a) const override {
    cuda::cross_entropy_shard_sumexp(stats, a.dlogits, device_logits(a, "cross_entropy_shard_sumexp"), row_max,
                                     a.targets, a.ignore_index, a.vocab_start, a.V, a.N, a.Vl, kStream);
  }
  double cross_entropy_shard_finish(const double* stats, const float* row_max, const CrossEntropyArgs& a) const override {
    device_logits(a, "cross_entropy_shard_finish");
    cuda::cross_entropy_shard_finish(a.losses, a.dlogits, stats, row_max, a.targets, a.weights, a.ignore_index,
                                     a.grad_scale, a.vocab_start, a.V, a.N, a.Vl, kStream);
    if (a.dlogits_bf16) cast_f32_to_bf16(a.dlogits_bf16, a.dlogits, a.N * a.Vl);
    cuda::sum(scalar_, a.losses, a.N, kStream);
    return download_scalar();
  }

  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                         int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                         float scale) const override {
    cuda::attention_forward<float>(out, lse, q, k, v, B, T, H, K, D, mask, scale, kStream);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, int64_t B, int64_t T, int64_t H,
                          int64_t K, int64_t D, const AttentionMask& mask, float scale) const override {
    cuda::attention_backward<float>(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, K, D, mask, scale, kStream);
  }
  void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t T,
                       int64_t H, int64_t D) const override {
    cuda::attention_merge(acc_out, acc_lse, out, lse, B, T, H, D, kStream);
  }
  // The bf16 kernels (cuDNN's where Auto picks it) between casts: the output, dout and the gradients go
  // through stream-ordered bf16 scratch.
  void attention_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                              float scale) const override {
    const int64_t n = B * T * H * D;
    bf16_t* o = scratch_bf16(n);
    cuda::attention_forward<bf16_t>(o, lse, bf(q), bf(k), bf(v), B, T, H, K, D, mask, scale, kStream);
    cuda::cast_bf16_to_f32(out, o, n, kStream);
    cuda::device_free_async(o, kStream);
  }
  void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                               const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse, int64_t B,
                               int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                               float scale) const override {
    const int64_t nq = B * T * H * D, nk = B * T * K * D;
    bf16_t* s = scratch_bf16(2 * nq + 2 * nk);  // dout, dq, dk, dv
    bf16_t *d_o = s, *gq = s + nq, *gk = s + 2 * nq, *gv = s + 2 * nq + nk;
    cuda::cast_f32_to_bf16(d_o, dout, nq, kStream);
    cuda::attention_backward<bf16_t>(gq, gk, gv, d_o, bf(q), bf(k), bf(v), bf(out), lse, B, T, H, K, D, mask, scale,
                                     kStream);
    cuda::cast_bf16_to_f32(dq, gq, nq, kStream);
    cuda::cast_bf16_to_f32(dk, gk, nk, kStream);
    cuda::cast_bf16_to_f32(dv, gv, nk, kStream);
    cuda::device_free_async(s, kStream);
  }

  void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                                const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                                int64_t D, bool causal, float scale) const override {
    cuda::decode_attention_forward(out, q, k_cache, v_cache, offsets, B, Tn, S, H, K, D, causal, scale, kStream);
  }

  void cast_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) const override {
    cuda::cast_f32_to_bf16(bf(out), inp, n, kStream);
  }
  void cast_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) const override {
    cuda::cast_bf16_to_f32(out, bf(inp), n, kStream);
  }
  void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n) const override {
    cuda::cast_f32_to_f16(out, inp, n, kStream);
  }
  void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n) const override {
    cuda::cast_f16_to_f32(out, inp, n, kStream);
  }
  void cast_f32_to_fp8(uint8_t* out, const float* inp, int64_t n, float scale, bool e5m2) const override {
    if (e5m2) cuda::cast_f32_to_e5m2(out, inp, n, scale, kStream);
    else cuda::cast_f32_to_e4m3(out, inp, n, scale, kStream);
  }
  void cast_fp8_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, bool e5m2) const override {
    if (e5m2) cuda::cast_e5m2_to_f32(out, inp, n, inv_scale, kStream);
    else cuda::cast_e4m3_to_f32(out, inp, n, inv_scale, kStream);
  }
  void round_to_bf16(float* x, int64_t n) const override { cuda::round_to_bf16(x, n, kStream); }
  void round_to_f16(float* x, int64_t n) const override { cuda::round_to_f16(x, n, kStream); }
  void quantize_dequantize_fp8(float* x, int64_t n, float scale, bool e5m2) const override {
    if (e5m2) cuda::quantize_dequantize_e5m2(x, n, scale, kStream);
    else cuda::quantize_dequantize_e4m3(x, n, scale, kStream);
  }

  void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                  uint16_t* param_bf16) const override {
    cuda::adamw_step(param, grad, m, v, n, h, reinterpret_cast<bf16_t*>(param_bf16), kStream);
  }
  double sum_squares(const float* x, int64_t n) const override {
    cuda::sum_squares(scalar_, x, n, kStream);
    return download_scalar();
  }
  float abs_max(const float* x, int64_t n) const override {
    if (n <= 0) return 0.0f;
    float* out = reinterpret_cast<float*>(scalar_);
    cuda::abs_max(out, x, n, kStream);
    float h = 0;
    cuda::copy_to_host(&h, out, sizeof(float));  // waits for the reduction (legacy default stream)
    return h;
  }
  // The sum of squares in double of finite fp32 values is finite (at most n * 2^256), so an inf or a
  // NaN among them, and only that, makes it non-finite.
  bool all_finite(const float* x, int64_t n) const override { return std::isfinite(sum_squares(x, n)); }

 private:
  double* scalar_ = nullptr;  // [1] device double: the target of the reductions that come back to the host
  bool fp8_capable_ = false;     // sm_89+: fp8 tensor cores
  mutable bool fp8_refused_ = false;  // cuBLASLt refused an fp8 product once: the fallback from then on

  static double time_square_gemm(bool bf16, int64_t n) {
    const size_t in_bytes = static_cast<size_t>(n * n) * (bf16 ? 2 : 4);
    void* a = cuda::device_alloc(in_bytes);
    void* b = cuda::device_alloc(in_bytes);
    float* c = static_cast<float*>(cuda::device_alloc(static_cast<size_t>(n * n) * sizeof(float)));
    cuda::memset_device(a, 0x3F, in_bytes);  // 0x3F3F (bf16) / 0x3F3F3F3F (fp32): about 0.75
    cuda::memset_device(b, 0x3F, in_bytes);
    double best = 0;
    for (int rep = 0; rep < 6; ++rep) {
      cuda::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      if (bf16)
        cuda::gemm_bf16(false, true, n, n, n, 1.0f, static_cast<const bf16_t*>(a), n, static_cast<const bf16_t*>(b), n,
                        0.0f, c, n, kStream);
      else
        cuda::gemm_f32(false, true, n, n, n, 1.0f, static_cast<const float*>(a), n, static_cast<const float*>(b), n,
                       0.0f, c, n, kStream);
      cuda::synchronize();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0 && secs > 0) best = std::max(best, 2.0 * static_cast<double>(n) * n * n / secs);
    }
    cuda::device_free(a);
    cuda::device_free(b);
    cuda::device_free(c);
    return best;
  }
  static bool fp8_shape_ok(int64_t M, int64_t N, int64_t K, const void* A, const void* B, const void* C) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return M % 16 == 0 && N % 16 == 0 && K % 16 == 0 && aligned(A) && aligned(B) && aligned(C);
  }

  static bf16_t* scratch_bf16(int64_t n) {
    return static_cast<bf16_t*>(cuda::device_alloc_async(static_cast<size_t>(n) * sizeof(bf16_t), kStream));
  }
  double download_scalar() const {
    double h = 0;
    cuda::copy_to_host(&h, scalar_, sizeof(double));  // waits for the reduction (legacy default stream)
    return h;
  }
};

}  // namespace

// kernels/dispatch.cpp: called once, after a GPU was found.
const Backend& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace megadlm
