// The CPU backend: every op forwards to kernels/cpu/ unchanged.
#include <cstring>

#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/fp8_gemm.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_peak.h"
#include "kernels/cpu/grouped_gemm.h"
#include "kernels/cpu/moe_permute.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"

namespace megadlm {
namespace {

// The Backend's raw bf16 bits as the kernels' type (the same 2-byte layout).
const bf16_t* as_bf16(const uint16_t* p) { return reinterpret_cast<const bf16_t*>(p); }
// CrossEntropyArgs' logits in their two formats.
const float* f32(const void* p) { return static_cast<const float*>(p); }
const uint16_t* bf16_bits(const void* p) { return static_cast<const uint16_t*>(p); }

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::CPU; }

  void copy_to_device(void* dst, const void* src, size_t bytes) const override { copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) const override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) const override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) const override {
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
  }
  void synchronize() const override {}

  double peak_gemm_flops(bool bf16) const override { return cpu::gemm_peak_flops(bf16); }
  std::string peak_gemm_description() const override { return "oneDNN GEMM, " + cpu::gemm_peak_description(); }
  bool bf16_products() const override { return cpu::has_bf16_matmul(); }

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc) const override {
    cpu::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                 const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) const override {
    cpu::gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void gemm_fp8(int64_t M, int64_t N, int64_t K, const uint8_t* A, bool a_e5m2, float a_scale, const uint8_t* B,
                bool b_e5m2, float b_scale, float beta, float* C) const override {
    cpu::gemm_fp8(M, N, K, A, a_e5m2, a_scale, B, b_e5m2, b_scale, beta, C);
  }
  void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                            const float* const* W, float* Y) const override {
    cpu::grouped_gemm_forward(G, offsets, N, K, X, W, Y);
  }
  void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* const* W, float* dX) const override {
    cpu::grouped_gemm_backward_data(G, offsets, N, K, dY, W, dX);
  }
  void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                    const float* X, float* const* dW) const override {
    cpu::grouped_gemm_backward_weight(G, offsets, N, K, dY, X, dW);
  }
  void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C) const override {
    cpu::transpose_u8(out, in, R, C);
  }

  void gelu_forward(float* out, const float* inp, int64_t n) const override { cpu::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) const override {
    cpu::swiglu_forward(out, gate_up, N, F);
  }
  void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N, int64_t F) const override {
    cpu::swiglu_backward(dgate_up, gate_up, dout, N, F);
  }
  bool bf16_logits() const override { return true; }
  void gemm_bf16_to_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                         int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, float* scratch,
                         int64_t slab) const override {
    cpu::gemm_bf16_to_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, scratch, slab);
  }
  bool fused_bf16_activations() const override { return true; }
  void activation_forward_bf16(Activation act, uint16_t* a, uint16_t* h_bf16, const float* h, const float* bias,
                               int64_t N, int64_t F) const override {
    if (bias) cpu::gelu_forward_bf16(a, h_bf16, h, bias, N, F);
    else if (act == Activation::Gelu) cpu::gelu_forward_bf16(a, h_bf16, h, N * F);
    else cpu::swiglu_forward_bf16(a, h_bf16, h, N, F);
  }
  void activation_remake_bf16(Activation act, uint16_t* a, const uint16_t* h, int64_t N, int64_t F) const override {
    if (act == Activation::Gelu) cpu::gelu_forward_bf16(a, h, N * F);
    else cpu::swiglu_forward_bf16(a, h, N, F);
  }
  void activation_backward_from_bf16(Activation act, float* dh, const uint16_t* h, const float* da, int64_t N,
                                     int64_t F) const override {
    if (act == Activation::Gelu) cpu::gelu_backward(dh, h, da, N * F);
    else cpu::swiglu_backward(dh, h, da, N, F);
  }
  void activation_backward_bf16(Activation act, uint16_t* dh, float* dbias, const uint16_t* h, const float* da,
                                int64_t N, int64_t F) const override {
    if (act == Activation::Gelu) cpu::gelu_backward_bf16_and_bias(dh, dbias, h, da, N, F);
    else cpu::swiglu_backward_bf16(dh, h, da, N, F);
  }
  void gelu_remake_and_backward_bf16(uint16_t* a, uint16_t* dh, float* dbias, const uint16_t* h, const float* da,
                                     int64_t N, int64_t F) const override {
    cpu::gelu_remake_and_backward_bf16(a, dh, dbias, h, da, N, F);
  }
  void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) const override {
    cpu::bias_add_forward(out, bias, N, C);
  }
  void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) const override {
    cpu::bias_backward(dbias, dout, N, C);
  }
  void cast_bf16_and_bias_backward(uint16_t* out, float* dbias, const float* dout, int64_t N,
                                   int64_t C) const override {
    cpu::cast_bf16_and_bias_backward(out, dbias, dout, N, C);
  }
  void add_inplace(float* a, const float* b, int64_t n) const override { cpu::add_inplace(a, b, n); }
  // The MoE dispatch and combine (nn/moe/moe_dispatcher.cpp); the CPU output layer gathers its own rows
  // (nn/lm_head.cpp).
  void moe_permute(float* rows, const float* x, const int32_t* token, const float* weight, int64_t P,
                   int64_t C) const override {
    cpu::moe_permute(rows, x, token, weight, P, C);
  }
  void moe_unpermute(float* out, const float* rows, const int32_t* offsets, const int32_t* list, const float* weight,
                     int64_t N, int64_t C) const override {
    cpu::moe_unpermute(out, rows, offsets, list, weight, N, C);
  }
  void moe_unpermute_weight_grad(float* dweight, const float* dout, const float* rows, const int32_t* token, int64_t P,
                                 int64_t C) const override {
    cpu::moe_unpermute_weight_grad(dweight, dout, rows, token, P, C);
  }
  void scale_inplace(float* a, float s, int64_t n) const override { cpu::scale_inplace(a, s, n); }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C, float eps) const override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N,
                          int64_t C) const override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                       float eps) const override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, int64_t N, int64_t C) const override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }

  void softmax_forward(float* out, const float* inp, int64_t N, int64_t V) const override {
    cpu::softmax_forward(out, inp, N, V);
  }
  void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V) const override {
    cpu::softmax_backward(din, out, dout, N, V);
  }

  void rope_tables(float* cos, float* sin, int64_t P, int64_t D, double base) const override {
    cpu::rope_tables(cos, sin, P, D, base);
  }
  void rope_forward(float* out, const float* inp, const int32_t* positions, const float* cos, const float* sin,
                    int64_t N, int64_t H, int64_t D) const override {
    cpu::rope_forward(out, inp, positions, cos, sin, N, H, D);
  }
  void rope_backward(float* dinp, const float* dout, const int32_t* positions, const float* cos, const float* sin,
                     int64_t N, int64_t H, int64_t D) const override {
    cpu::rope_backward(dinp, dout, positions, cos, sin, N, H, D);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                         const int32_t* positions, const float* wpe, int64_t N, int64_t C) const override {
    cpu::embedding_forward(out, tokens, wte, vocab_start, V, positions, wpe, N, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t vocab_start,
                          int64_t V, const int32_t* positions, int64_t N, int64_t C) const override {
    cpu::embedding_backward(dwte, dwpe, dout, tokens, vocab_start, V, positions, N, C);
  }

  double cross_entropy(const CrossEntropyArgs& a) const override {
    if (a.logits_bf16)
      return cpu::cross_entropy_forward_backward_bf16(a.losses, a.dlogits_bf16, bf16_bits(a.logits), a.targets,
                                                      a.weights, a.ignore_index, a.grad_scale, a.N, a.Vl);
    if (a.dlogits_bf16)
      return cpu::cross_entropy_forward_backward_bf16(a.losses, a.dlogits_bf16, f32(a.logits), a.targets, a.weights,
                                                      a.ignore_index, a.grad_scale, a.N, a.Vl);
    return cpu::cross_entropy_forward_backward(a.losses, a.dlogits, f32(a.logits), a.targets, a.weights,
                                               a.ignore_index, a.grad_scale, a.N, a.Vl);
  }
  void cross_entropy_shard_max(float* row_max, const CrossEntropyArgs& a) const override {
    if (a.logits_bf16) cpu::cross_entropy_shard_max(row_max, bf16_bits(a.logits), a.targets, a.ignore_index, a.N, a.Vl);
    else cpu::cross_entropy_shard_max(row_max, f32(a.logits), a.targets, a.ignore_index, a.N, a.Vl);
  }
  void cross_entropy_shard_sumexp(double* stats, const float* row_max, const CrossEntropyArgs& a) const override {
    if (a.logits_bf16)
      cpu::cross_entropy_shard_sumexp(stats, bf16_bits(a.logits), row_max, a.targets, a.ignore_index, a.vocab_start,
                                      a.N, a.Vl);
    else
      cpu::cross_entropy_shard_sumexp(stats, a.dlogits, f32(a.logits), row_max, a.targets, a.ignore_index,
                                      a.vocab_start, a.N, a.Vl);
  }
  double cross_entropy_shard_finish(const double* stats, const float* row_max, const CrossEntropyArgs& a) const override {
    if (a.logits_bf16)
      return cpu::cross_entropy_shard_finish(a.losses, a.dlogits_bf16, bf16_bits(a.logits), stats, row_max, a.targets,
                                             a.weights, a.ignore_index, a.grad_scale, a.vocab_start, a.N, a.Vl);
    return cpu::cross_entropy_shard_finish(a.losses, a.dlogits, stats, row_max, a.targets, a.weights, a.ignore_index,
                                           a.grad_scale, a.vocab_start, a.N, a.Vl, a.dlogits_bf16);
  }

  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                         int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                         float scale) const override {
    cpu::attention_forward(out, lse, q, k, v, B, T, H, K, D, mask, scale);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, int64_t B, int64_t T, int64_t H,
                          int64_t K, int64_t D, const AttentionMask& mask, float scale) const override {
    cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, K, D, mask, scale);
  }
  void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t T,
                       int64_t H, int64_t D) const override {
    cpu::attention_merge(acc_out, acc_lse, out, lse, B, T, H, D);
  }
  void attention_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                              float scale) const override {
    cpu::attention_forward_bf16(out, lse, as_bf16(q), as_bf16(k), as_bf16(v), B, T, H, K, D, mask, scale);
  }
  void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                               const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse, int64_t B,
                               int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                               float scale) const override {
    cpu::attention_backward_bf16(dq, dk, dv, dout, as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(out), lse, B, T, H, K,
                                 D, mask, scale);
  }

  void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                                const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                                int64_t D, bool causal, float scale) const override {
    cpu::decode_attention_forward(out, q, k_cache, v_cache, offsets, B, Tn, S, H, K, D, causal, scale);
  }

  void cast_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) const override {
    cpu::cast_f32_to_bf16(out, inp, n);
  }
  void cast_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) const override {
    cpu::cast_bf16_to_f32(out, inp, n);
  }
  void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n) const override { cpu::cast_f32_to_f16(out, inp, n); }
  void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n) const override { cpu::cast_f16_to_f32(out, inp, n); }
  void cast_f32_to_fp8(uint8_t* out, const float* inp, int64_t n, float scale, bool e5m2) const override {
    if (e5m2) cpu::cast_f32_to_e5m2(out, inp, n, scale);
    else cpu::cast_f32_to_e4m3(out, inp, n, scale);
  }
  void cast_fp8_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, bool e5m2) const override {
    if (e5m2) cpu::cast_e5m2_to_f32(out, inp, n, inv_scale);
    else cpu::cast_e4m3_to_f32(out, inp, n, inv_scale);
  }
  void round_to_bf16(float* x, int64_t n) const override { cpu::round_to_bf16(x, n); }
  void round_to_f16(float* x, int64_t n) const override { cpu::round_to_f16(x, n); }
  void quantize_dequantize_fp8(float* x, int64_t n, float scale, bool e5m2) const override {
    if (e5m2) cpu::quantize_dequantize_e5m2(x, n, scale);
    else cpu::quantize_dequantize_e4m3(x, n, scale);
  }

  void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                  uint16_t* param_bf16) const override {
    cpu::adamw_step(param, grad, m, v, n, h, param_bf16);
  }
  double sum_squares(const float* x, int64_t n) const override { return cpu::sum_squares(x, n); }
  float abs_max(const float* x, int64_t n) const override { return cpu::abs_max(x, n); }
  bool all_finite(const float* x, int64_t n) const override { return cpu::all_finite(x, n); }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace megadlm
