#pragma once
// Backend: the operations the nn/ modules, the optimizer and the trainer need, as one interface with an
// implementation per device (Megatron-core's idea: the device lives in the building blocks, not in the
// model code). A module asks `backend_for(tensor.device())` and calls the op; the CPU implementation
// (kernels/backend_cpu.cpp, always built) forwards to kernels/cpu/, the CUDA one
// (kernels/cuda/backend_cuda.cpp, only with -DMEGADLM_CUDA=ON) to kernels/cuda/ops.h on one stream.
// The cost on the CPU is one virtual call per op.
//
// Contracts are those of kernels/cpu/*.h, with every pointer on the backend's device unless a comment
// says "host". Activations are fp32; bf16 values are raw bits (uint16_t). Backward ops WRITE input
// gradients and ACCUMULATE parameter gradients.
// Legend: N rows (B*T), C hidden, H heads, K kv heads, D head dim, F ffn hidden, V vocabulary.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "kernels/types.h"

namespace megadlm {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // ---- memory; copies are synchronous with respect to the host ----
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) const = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) const = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) const = 0;  // within the device
  virtual void zero(void* dst, size_t bytes) const = 0;
  // rows pieces of `width` bytes within the device: piece r from src + r * src_pitch to dst + r * dst_pitch.
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                       size_t rows) const = 0;
  virtual void synchronize() const = 0;  // waits for the device's queued work; reports a kernel fault

  // ---- matrix products, row-major (kernels/cpu/gemm.h) ----
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) const = 0;
  virtual void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                         int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) const = 0;
  // bf16 inputs, fp32 accumulation, the result rounded to bf16: C [M, N] = bf16(alpha op(A) op(B)), C
  // written without being read; through fp32 slabs of `slab` columns in scratch [M, slab] where that is
  // the faster way (kernels/cpu/gemm.h). The output layer's bf16 logits, where bf16_logits() is true.
  virtual bool bf16_logits() const { return false; }
  virtual void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                                 const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C,
                                 int64_t ldc, float* scratch, int64_t slab) const;
  // fp8 (kernels/cpu/fp8_gemm.h): C [M,N] = (A [M,K] * a_scale) @ (B [N,K] * b_scale)^T + beta C, A and B
  // fp8 codes (E5M2 where flagged, else E4M3), the scales their dequantisation factors. Real fp8
  // products where fp8_products() says so; elsewhere the dequantised values multiplied in fp32.
  virtual void gemm_fp8(int64_t M, int64_t N, int64_t K, const uint8_t* A, bool a_e5m2, float a_scale,
                        const uint8_t* B, bool b_e5m2, float b_scale, float beta, float* C) const = 0;
  // Whether gemm_fp8 multiplies fp8 (a GPU with fp8 tensor cores): the Linear layers then keep fp8
  // operands for their products instead of dequantised fp32 copies (nn/precision.h).
  virtual bool fp8_products() const { return false; }
  // out [C, R] = in [R, C]^T, bytes: the transposed fp8 operands of the backward's products.
  virtual void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C) const = 0;
  // The device's GEMM rate in FLOP/s for the trainer's MFU and --bf16's choice of products, measured once
  // per precision (bf16 or fp32 products) and per process; 0 where not measured. How, for the log.
  virtual double peak_gemm_flops(bool bf16) const {
    (void)bf16;
    return 0.0;
  }
  virtual std::string peak_gemm_description() const { return ""; }
  // Whether gemm_bf16 multiplies bf16 (rather than widening its inputs to fp32 products).
  virtual bool bf16_products() const { return true; }

  // ---- grouped products over experts (kernels/cpu/grouped_gemm.h): an MoE layer's fc1 / fc2 ----
  // Group g owns rows [offsets[g], offsets[g+1]) of the row-major operands and the weight W_g [N, K];
  // offsets [G+1] and the pointer arrays W / dW [G] are host arrays, the pointers device pointers.
  // Y [P, N] rows of g = X [P, K] rows of g @ W_g^T, written.
  virtual void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                                    const float* const* W, float* Y) const;
  // dX [P, K] rows of g = dY [P, N] rows of g @ W_g, written.
  virtual void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                          const float* const* W, float* dX) const;
  // dW_g [N, K] += (dY rows of g)^T @ (X rows of g); an empty group leaves dW_g as it was.
  virtual void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K,
                                            const float* dY, const float* X, float* const* dW) const;

  // ---- pointwise (kernels/cpu/elementwise.h) ----
  virtual void gelu_forward(float* out, const float* inp, int64_t n) const = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const = 0;
  // gate_up [N, 2F] -> out [N, F];  dgate_up [N, 2F] written from dout [N, F].
  virtual void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) const = 0;
  virtual void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N,
                               int64_t F) const = 0;
  virtual void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) const = 0;  // out [N,C]
  virtual void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) const = 0;   // dbias [C] +=
  virtual void add_inplace(float* a, const float* b, int64_t n) const = 0;
  // ---- the bf16 MLP's activation in one pass each (kernels/cpu/elementwise.h): the bits of the cast,
  // fp32 activation and cast sequence without the fp32 [N, F] between. Where fused_bf16_activations() is
  // false the MLP runs that sequence itself and these are never called (they fail by default).
  // h / gate_up [N, Fh] (Fh = F, or 2F for SwiGLU's [gate; up]), a / da [N, F].
  virtual bool fused_bf16_activations() const { return false; }
  // a = bf16(act(bf16(h))); h_bf16 (or null) = bf16(h); with bias [F] (GELU only) of h + bias.
  virtual void activation_forward_bf16(Activation act, uint16_t* a, uint16_t* h_bf16, const float* h,
                                       const float* bias, int64_t N, int64_t F) const;
  // a = bf16(act(h)) of the kept bf16 h (the backward's remake).
  virtual void activation_remake_bf16(Activation act, uint16_t* a, const uint16_t* h, int64_t N, int64_t F) const;
  // dh [N, Fh] fp32, written: the activation's backward at the kept bf16 h.
  virtual void activation_backward_from_bf16(Activation act, float* dh, const uint16_t* h, const float* da, int64_t N,
                                             int64_t F) const;
  // The same rounded to bf16; GELU also adds its column sums to dbias [F] (or null), SwiGLU takes none.
  virtual void activation_backward_bf16(Activation act, uint16_t* dh, float* dbias, const uint16_t* h,
                                        const float* da, int64_t N, int64_t F) const;
  // GELU's remake (a) and backward (dh, dbias) from one read of h.
  virtual void gelu_remake_and_backward_bf16(uint16_t* a, uint16_t* dh, float* dbias, const uint16_t* h,
                                             const float* da, int64_t N, int64_t F) const;

  // ---- row permutations (kernels/cpu/moe_permute.h): MoE dispatch / combine, the output layer's rows ----
  // rows [P, C] = x[token[p]] (* weight[p] unless weight is null); token[p] < 0 (padding) gives a zero row.
  virtual void moe_permute(float* rows, const float* x, const int32_t* token, const float* weight, int64_t P,
                           int64_t C) const = 0;
  // out [N, C] written: out[n] = sum of (weight[p] or 1) * rows[p] over list[offsets[n] .. offsets[n+1]),
  // in that order; 0 for a token with no rows.
  virtual void moe_unpermute(float* out, const float* rows, const int32_t* offsets, const int32_t* list,
                             const float* weight, int64_t N, int64_t C) const = 0;
  // dweight [P] written: dot(dout[token[p]], rows[p]), 0 for padding.
  virtual void moe_unpermute_weight_grad(float* dweight, const float* dout, const float* rows, const int32_t* token,
                                         int64_t P, int64_t C) const = 0;
  // Row gather dst [n, C] = src[index[k]], and its inverse: dst [N, C] row i = the sum of the src rows
  // listed for i (offsets [N+1] into rows [n]), zero when none is. The unweighted permutations.
  void gather_rows(float* dst, const float* src, const int32_t* index, int64_t n, int64_t C) const {
    moe_permute(dst, src, index, nullptr, n, C);
  }
  void scatter_rows(float* dst, const float* src, const int32_t* offsets, const int32_t* rows, int64_t N,
                    int64_t C) const {
    moe_unpermute(dst, src, offsets, rows, nullptr, N, C);
  }
  virtual void scale_inplace(float* a, float s, int64_t n) const = 0;

  // ---- softmax over rows (kernels/cpu/softmax.h): x, out [N, V] ----
  // out = softmax(inp) per row (may alias inp).
  virtual void softmax_forward(float* out, const float* inp, int64_t N, int64_t V) const = 0;
  // din = out * (dout - rowsum(dout * out)), written (may alias dout); out the forward's output.
  virtual void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V) const = 0;

  // ---- norms (kernels/cpu/norm.h): out, inp [N,C]; mean, rstd [N]; weight, bias [C] ----
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int64_t N, int64_t C, float eps) const = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, int64_t N,
                                  int64_t C) const = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                               float eps) const = 0;
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                const float* rstd, int64_t N, int64_t C) const = 0;

  // ---- rotary embedding (kernels/cpu/rope.h): x [N,H,D], positions [N], cos/sin [P, D/2] ----
  // cos, sin [P, D/2] for positions 0..P-1 (angles in double, rounded once): the tables the two ops
  // below read. By default made on the host (kernels/cpu/rope.h) and copied to the device.
  virtual void rope_tables(float* cos, float* sin, int64_t P, int64_t D, double base) const;
  virtual void rope_forward(float* out, const float* inp, const int32_t* positions, const float* cos,
                            const float* sin, int64_t N, int64_t H, int64_t D) const = 0;
  virtual void rope_backward(float* dinp, const float* dout, const int32_t* positions, const float* cos,
                             const float* sin, int64_t N, int64_t H, int64_t D) const = 0;

  // ---- embeddings (kernels/cpu/embedding.h) ----
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                                 const int32_t* positions, const float* wpe, int64_t N, int64_t C) const = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                  int64_t vocab_start, int64_t V, const int32_t* positions, int64_t N,
                                  int64_t C) const = 0;

  // ---- softmax cross-entropy (kernels/cpu/cross_entropy.h; the arguments: kernels/types.h) ----
  // The whole vocabulary on this rank (Vl == V): losses and gradient in one pass over the logits. Returns
  // the sum of the losses (on a device: summed there in a fixed order and downloaded, one
  // synchronisation). A device takes fp32 logits; it makes dlogits_bf16 from the fp32 gradient in
  // dlogits, which must then be given.
  virtual double cross_entropy(const CrossEntropyArgs& a) const = 0;
  // The vocab-parallel pieces on columns [vocab_start, vocab_start + Vl) of V (tensor parallelism): (1)
  // row_max [N]; (2) stats [2N] (double: the sum of exponentials, the target's logit or 0), with fp32
  // logits the exponentials into a.dlogits (or nowhere when null); (3) with both reduced over the tp
  // ranks, the losses and the gradient from them. Returns the sum of the losses. The CPU leaves
  // checking the targets to its caller; a device, which cannot throw, gives an out-of-range target
  // that is not ignore_index a NaN loss.
  virtual void cross_entropy_shard_max(float* row_max, const CrossEntropyArgs& a) const = 0;
  virtual void cross_entropy_shard_sumexp(double* stats, const float* row_max, const CrossEntropyArgs& a) const = 0;
  virtual double cross_entropy_shard_finish(const double* stats, const float* row_max,
                                            const CrossEntropyArgs& a) const = 0;

  // ---- attention (kernels/cpu/attention.h); mask.segment_ids on the device ----
  virtual void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                                 int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                                 float scale) const = 0;
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                  const float* v, const float* out, const float* lse, int64_t B, int64_t T,
                                  int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                                  float scale) const = 0;

  // acc_out [B,T,H,D], acc_lse [B,H,T] merged with out, lse: the attention over both key sets
  // (kernels/cpu/attention.h; context parallelism's ring).
  virtual void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B,
                               int64_t T, int64_t H, int64_t D) const = 0;

  // The same on bf16 q, k, v (and the backward's bf16 forward output), fp32 out, lse and gradients: a
  // --bf16 run's attention (kernels/cpu/attention_bf16.h on the CPU; on a device the bf16 kernels,
  // cuDNN's fused attention where it applies). dout is rounded to bf16 as an operand.
  virtual void attention_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                      int64_t B, int64_t T, int64_t H, int64_t K, int64_t D,
                                      const AttentionMask& mask, float scale) const = 0;
  virtual void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const uint16_t* q,
                                       const uint16_t* k, const uint16_t* v, const uint16_t* out, const float* lse,
                                       int64_t B, int64_t T, int64_t H, int64_t K, int64_t D,
                                       const AttentionMask& mask, float scale) const = 0;

  // ---- attention against a KV cache (kernels/cpu/decode_attention.h): inference only, no lse ----
  // q, out [B, Tn, H, D]; k_cache, v_cache [B, S, K, D]; offsets [B] on the device (int64), checked by
  // the caller to keep offsets[b] + Tn <= S.
  virtual void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                                        const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H,
                                        int64_t K, int64_t D, bool causal, float scale) const = 0;

  // ---- casts (kernels/cpu/cast.h) ----
  virtual void cast_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) const = 0;
  virtual void cast_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) const = 0;
  // fp16 (IEEE binary16 bits) and fp8 (e5m2 false: E4M3, true: E5M2; saturating, NaN stays NaN) with the
  // recipes' scale: code = q(x * scale), x ~= dq(code) * inv_scale.
  virtual void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n) const = 0;
  virtual void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n) const = 0;
  virtual void cast_f32_to_fp8(uint8_t* out, const float* inp, int64_t n, float scale, bool e5m2) const = 0;
  virtual void cast_fp8_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, bool e5m2) const = 0;
  // In place, x [n] = the value the narrow format holds for it (the emulated recipes around fp32 products):
  // bf16, fp16 (inf beyond 65504), fp8 dq(q(x * scale)) / scale.
  virtual void round_to_bf16(float* x, int64_t n) const = 0;
  virtual void round_to_f16(float* x, int64_t n) const = 0;
  virtual void quantize_dequantize_fp8(float* x, int64_t n, float scale, bool e5m2) const = 0;
  // out [N, C] = dout rounded to bf16, dbias [C] += column sums of dout: a bf16 Linear's output gradient
  // and its bias gradient from one read of dout. By default the two ops, one after the other.
  virtual void cast_bf16_and_bias_backward(uint16_t* out, float* dbias, const float* dout, int64_t N,
                                           int64_t C) const {
    bias_backward(dbias, dout, N, C);
    cast_f32_to_bf16(out, dout, N * C);
  }

  // ---- optimizer and reductions (kernels/cpu/optim.h) ----
  // param_bf16 [n] (or null): the updated param in bf16 as well, on the same pass.
  virtual void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                          uint16_t* param_bf16) const = 0;
  // The sum of x^2 in a fixed order, downloaded to the host (one synchronisation on a device).
  virtual double sum_squares(const float* x, int64_t n) const = 0;
  // max |x| (NaN if any element is NaN) and whether every element is finite, downloaded likewise.
  virtual float abs_max(const float* x, int64_t n) const = 0;
  virtual bool all_finite(const float* x, int64_t n) const = 0;
};

// The backend of `device`. The CPU one always exists; asking for CUDA in a build without it, or where
// no GPU is visible, throws an Error that says which. The first CUDA request also registers the CUDA
// memory table of core/device_memory.h.
const Backend& backend_for(Device device);
inline const Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

// The CPU implementation (kernels/backend_cpu.cpp).
const Backend& cpu_backend();

}  // namespace megadlm
