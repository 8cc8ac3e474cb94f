#pragma once
// The CUDA backend's operations: the contracts of kernels/cpu/*.h on device pointers, plus a stream.
// Compiled only with -DMEGADLM_CUDA=ON (MEGADLM_HAVE_CUDA defined); include it only under that macro.
//
// Legend: B batch, T sequence, C hidden, H query heads, K kv heads, D head dim, F ffn hidden,
// V vocabulary, N = B*T tokens, P dispatched MoE rows.
//
// Element types: activations are `T` = float or bf16_t (raw bf16 bits, as on the CPU side); every
// kernel computes in fp32 and rounds once on store. Norm weights, biases, embedding tables, optimizer
// state and statistics (mean, rstd, lse, losses) are fp32. All pointers are device pointers unless a
// comment says otherwise; every call is asynchronous on `stream` (0 = the legacy default stream).
// Conventions as on the CPU: backward kernels WRITE input gradients and ACCUMULATE parameter gradients;
// parameter-gradient reductions use a fixed order, so results are bitwise reproducible run to run.
// Memory-bound kernels move 16 bytes per access when rows and pointers are 16-byte aligned.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "kernels/types.h"

namespace megadlm::cuda {

// ---- device and memory (device.cpp) ---------------------------------------------------------------
int device_count();                 // 0 when the driver or a device is missing (never throws)
int compute_capability();           // major * 10 + minor of the current device, e.g. 90 for H100/H200
std::string device_name();
void* device_alloc(size_t bytes);   // throws Error naming the size on failure
void device_free(void* p);
// Stream-ordered scratch from the device's pool (kept between steps, see device.cpp).
void* device_alloc_async(size_t bytes, cudaStream_t stream);
void device_free_async(void* p, cudaStream_t stream);
void copy_to_device(void* dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* src, size_t bytes);
void memset_device(void* dst, int value, size_t bytes);
void synchronize();                 // device-wide; throws Error with CUDA's message on a kernel fault

// An owning device buffer (RAII), for tests, benchmarks and scratch.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n), p_(n ? static_cast<T*>(device_alloc(n * sizeof(T))) : nullptr) {}
  ~DeviceBuffer() { device_free(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : n_(o.n_), p_(o.p_) { o.n_ = 0; o.p_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
    return *this;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const T* host) { copy_to_device(p_, host, n_ * sizeof(T)); }
  void download(T* host) const { copy_to_host(host, p_, n_ * sizeof(T)); }

 private:
  size_t n_ = 0;
  T* p_ = nullptr;
};

// ---- matrix products through cuBLASLt (gemm.cpp) ---------------------------------------------------
// Row-major, as kernels/cpu/gemm.h:  C[M,N] = epilogue(alpha * op(A)[M,K] @ op(B)[K,N] + beta * C + bias)
// A is stored [M,K] (or [K,M] when trans_a), B [K,N] (or [N,K] when trans_b).
enum class Epilogue : uint8_t {
  None,
  Bias,      // + bias[N] broadcast over rows (a Linear layer's bias)
  Gelu,      // GELU (tanh approximation, as cpu::gelu_forward) of the product; aux, when set, receives
             // the pre-activation [M,N] (ld = ldc) for the backward
  BiasGelu,  // GELU(product + bias); aux as for Gelu
  DGelu,     // the product times gelu'(aux): the input gradient of the fc2 matmul fused with the GELU
             // backward (aux = the forward's saved pre-activation, same type and ld as C)
};

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;  // beta = 0 overwrites C without reading it
  // a_type, b_type: F32, BF16, F8E4M3 or F8E5M2 (both fp8 or neither); c_type: F32 or BF16.
  // F32 x F32 -> F32 (TF32 tensor cores when `tf32`); BF16 x BF16 -> BF16 or F32 (fp32 accumulation);
  // fp8 x fp8 -> BF16 or F32 on sm_90 only, with trans_a = false and trans_b = true (C = A @ B^T, the
  // layout cuBLASLt's fp8 kernels require), and not e5m2 x e5m2.
  DType a_type = DType::F32, b_type = DType::F32, c_type = DType::F32;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  void* C = nullptr;
  int64_t ldc = 0;
  // Out of place: when set, the result goes to D (C's type and layout, not aliasing C) and C is only read
  // (beta != 0): D = alpha op(A) op(B) + beta C, e.g. a projection added to the residual stream in one pass.
  void* D = nullptr;
  bool tf32 = false;
  Epilogue epilogue = Epilogue::None;
  const void* bias = nullptr;  // [N], of c_type
  void* aux = nullptr;         // [M,N] of c_type, ld = ldc (Gelu/BiasGelu output, DGelu input)
  // fp8 only: dequantisation scales, device scalars: the product is computed as (A * a_scale) @ (B * b_scale).
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  // Strided batch: `batch` products, matrix i of A at A + i * stride_a elements (likewise B, C).
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

void gemm(const GemmArgs& g, cudaStream_t stream = 0);

// Mirrors of cpu::gemm, cpu::gemm_bf16 and cpu::gemm_batched (fp32 C; tf32 off: exact fp32 products).
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
              int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream = 0);
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const bf16_t* A,
               int64_t lda, const bf16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream = 0);
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                  float beta, float* C, int64_t ldc, int64_t stride_c, cudaStream_t stream = 0);

// ---- grouped products over experts (grouped_gemm.cpp): kernels/cpu/grouped_gemm.h's contract, one
// cublasGemmGroupedBatchedEx call each; offsets and the pointer arrays W / dW on the host ----
void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                          const float* const* W, float* Y, cudaStream_t stream = 0);
void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                const float* const* W, float* dX, cudaStream_t stream = 0);
void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* X, float* const* dW, cudaStream_t stream = 0);

// ---- pointwise (elementwise.cu); out may alias inp; `n` elements -----------------------------------
template <typename T> void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream = 0);
template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream = 0);
template <typename T> void silu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream = 0);
template <typename T> void silu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream = 0);
// gate_up [N, 2F] (gate in columns [0,F), up in [F,2F)) -> out [N, F] = silu(gate) * up.
template <typename T> void swiglu_forward(T* out, const T* gate_up, int64_t N, int64_t F, cudaStream_t stream = 0);
// dgate_up [N, 2F] written, gate_up [N, 2F], dout [N, F].
template <typename T>
void swiglu_backward(T* dgate_up, const T* gate_up, const T* dout, int64_t N, int64_t F, cudaStream_t stream = 0);
// out [N,C] += bias [C];  dbias [C] += column sums of dout [N,C].
template <typename T> void bias_add_forward(T* out, const float* bias, int64_t N, int64_t C, cudaStream_t stream = 0);
template <typename T> void bias_backward(float* dbias, const T* dout, int64_t N, int64_t C, cudaStream_t stream = 0);
template <typename T> void residual_add(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream = 0);
template <typename T> void add_inplace(T* a, const T* b, int64_t n, cudaStream_t stream = 0);
template <typename T> void scale_inplace(T* a, float s, int64_t n, cudaStream_t stream = 0);

// ---- LayerNorm / RMSNorm with an optional fused residual add (norm.cu) -----------------------------
// When `residual` is not null the normalised input is x = inp + residual, and x is written to
// `sum_out` [N,C] (the residual stream for the next block; may alias inp). Otherwise x = inp.
// mean, rstd [N] are saved for the backward (mean may be null for RMSNorm).
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, float eps, const T* residual = nullptr, T* sum_out = nullptr,
                       cudaStream_t stream = 0);
// dinp [N,C] written: the gradient w.r.t. x, plus `dresidual` [N,C] when not null (the gradient that
// reaches the residual stream from above, so the fused add needs no extra pass). `inp` is x (sum_out when
// the forward fused a residual). dweight, dbias [C] accumulated (dbias may be null).
template <typename T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, const T* dresidual = nullptr,
                        cudaStream_t stream = 0);
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const float* weight, int64_t N, int64_t C, float eps,
                     const T* residual = nullptr, T* sum_out = nullptr, cudaStream_t stream = 0);
template <typename T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const float* weight, const float* rstd,
                      int64_t N, int64_t C, const T* dresidual = nullptr, cudaStream_t stream = 0);

// ---- softmax over rows (softmax.cu), as kernels/cpu/softmax.h ---------------------------------------
// out [N, V] = softmax(inp) per row (may alias inp).
void softmax_forward(float* out, const float* inp, int64_t N, int64_t V, cudaStream_t stream = 0);
// din [N, V] = out * (dout - rowsum(dout * out)), written (may alias dout).
void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V, cudaStream_t stream = 0);

// ---- rotary embedding (rope.cu), rotate-half convention of kernels/cpu/rope.h ----------------------
// x [N,H,D] (row stride H*D), positions [N], cos/sin [P, D/2] (fill them with cpu::rope_tables and copy).
template <typename T>
void rope_forward(T* out, const T* inp, const int32_t* positions, const float* cos, const float* sin, int64_t N,
                  int64_t H, int64_t D, cudaStream_t stream = 0);
template <typename T>
void rope_backward(T* dinp, const T* dout, const int32_t* positions, const float* cos, const float* sin, int64_t N,
                   int64_t H, int64_t D, cudaStream_t stream = 0);

// ---- attention inputs from a packed q|k|v projection (qkv_norm_rope.cu) ------------------------------
// qkv [N, (H + 2K) * D] (per token: H query heads, K key heads, K value heads) ->
//   q [N, H, D] = rope(rmsnorm(q heads, q_norm_weight [D])), k [N, K, D] likewise, v [N, K, D] = the v heads;
//   rstd_q [N*H], rstd_k [N*K] saved. As rmsnorm_forward then rope_forward without the rounding between.
// D: 64, 128 or 256 in bf16; 32, 64 or 128 in fp32 (anything else throws); tensors 16-byte aligned.
template <typename T>
void qkv_norm_rope_forward(T* q, T* k, T* v, float* rstd_q, float* rstd_k, const T* qkv, const float* q_norm_weight,
                           const float* k_norm_weight, const int32_t* positions, const float* cos, const float* sin,
                           int64_t N, int64_t H, int64_t K, int64_t D, float eps, cudaStream_t stream = 0);
// dq [N,H,D], dk, dv [N,K,D] (gradients w.r.t. q, k, v above) -> dqkv [N, (H + 2K) * D] written;
// dq_norm_weight, dk_norm_weight [D] accumulated. qkv is the forward's input.
template <typename T>
void qkv_norm_rope_backward(T* dqkv, float* dq_norm_weight, float* dk_norm_weight, const T* dq, const T* dk,
                            const T* dv, const T* qkv, const float* q_norm_weight, const float* k_norm_weight,
                            const float* rstd_q, const float* rstd_k, const int32_t* positions, const float* cos,
                            const float* sin, int64_t N, int64_t H, int64_t K, int64_t D, cudaStream_t stream = 0);

// ---- embeddings (embedding.cu) ---------------------------------------------------------------------
// As cpu::embedding_forward: out [N,C] = wte[tokens - vocab_start] (0 outside the shard) (+ wpe[positions]).
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                       const int32_t* positions, const float* wpe, int64_t N, int64_t C, cudaStream_t stream = 0);
// dwte [V,C], dwpe [P,C] accumulated (dwpe may be null). Each column is summed by one thread in token
// order: deterministic, no atomics.
template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t vocab_start, int64_t V,
                        const int32_t* positions, int64_t N, int64_t C, cudaStream_t stream = 0);

// ---- softmax cross-entropy over the vocabulary (cross_entropy.cu) ----------------------------------
// As cpu::cross_entropy_forward_backward, one block per row: losses [N] written; dlogits [N,V] (may alias
// logits, may be null) written. The sum of the losses is left to `sum` below (device-side, fixed order).
template <typename T>
void cross_entropy_forward_backward(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                    const float* weights, int64_t ignore_index, float grad_scale, int64_t N,
                                    int64_t V, cudaStream_t stream = 0);

// The vocab-parallel pieces on fp32 logits [N, Vl] (columns [vocab_start, vocab_start + Vl)), as
// cpu::cross_entropy_shard_max / _sumexp / _finish, one block per row; the caller reduces row_max [N]
// (max) and stats [2N] (sum) over the tp ranks between them. e and dlogits may alias logits. An
// out-of-range target that is not ignore_index gives a NaN loss and gradient row.
void cross_entropy_shard_max(float* row_max, const float* logits, const int32_t* targets, int64_t ignore_index,
                             int64_t N, int64_t Vl, cudaStream_t stream = 0);
void cross_entropy_shard_sumexp(double* stats, float* e, const float* logits, const float* row_max,
                                const int32_t* targets, int64_t ignore_index, int64_t vocab_start, int64_t V,
                                int64_t N, int64_t Vl, cudaStream_t stream = 0);
void cross_entropy_shard_finish(float* losses, float* dlogits, const double* stats, const float* row_max,
                                const int32_t* targets, const float* weights, int64_t ignore_index, float grad_scale,
                                int64_t vocab_start, int64_t V, int64_t N, int64_t Vl, cudaStream_t stream = 0);

// ---- optimizer and reductions (optim.cu) -----------------------------------------------------------
// As cpu::adamw_step on flat fp32 buffers [n]; when param_bf16 is not null it also receives the updated
// parameters rounded to bf16 (the compute copy of a bf16 run), saving a cast pass; with h.zero_grad
// grad [n] is zeroed on the same pass.
void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                bf16_t* param_bf16 = nullptr, cudaStream_t stream = 0);
// out[0] (device double) = sum of x [n] / sum of x^2 / max |x| (NaN if any NaN), in a fixed order.
void sum(double* out, const float* x, int64_t n, cudaStream_t stream = 0);
void sum_squares(double* out, const float* x, int64_t n, cudaStream_t stream = 0);
void abs_max(float* out, const float* x, int64_t n, cudaStream_t stream = 0);

// ---- casts (cast.cu); fp8 saturates to the largest finite value, NaN stays NaN ---------------------
void cast_f32_to_bf16(bf16_t* out, const float* inp, int64_t n, cudaStream_t stream = 0);
void cast_bf16_to_f32(float* out, const bf16_t* inp, int64_t n, cudaStream_t stream = 0);
void cast_f32_to_e4m3(uint8_t* out, const float* inp, int64_t n, float scale, cudaStream_t stream = 0);
void cast_e4m3_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, cudaStream_t stream = 0);
void cast_f32_to_e5m2(uint8_t* out, const float* inp, int64_t n, float scale, cudaStream_t stream = 0);
void cast_e5m2_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale, cudaStream_t stream = 0);
// fp16 bits (IEEE binary16, round to nearest even, overflow to inf).
void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n, cudaStream_t stream = 0);
void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n, cudaStream_t stream = 0);
// In place, x = the value the format holds for it (kernels/cpu/cast.h's round trips).
void round_to_bf16(float* x, int64_t n, cudaStream_t stream = 0);
void round_to_f16(float* x, int64_t n, cudaStream_t stream = 0);
void quantize_dequantize_e4m3(float* x, int64_t n, float scale, cudaStream_t stream = 0);
void quantize_dequantize_e5m2(float* x, int64_t n, float scale, cudaStream_t stream = 0);

// out [C, R] = in [R, C]^T, bytes (transpose.cu): the fp8 operands of the backward's products.
void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C, cudaStream_t stream = 0);

// ---- attention against a KV cache (decode_attention.cu): kernels/cpu/decode_attention.h's contract,
// offsets [B] a DEVICE array (the caller checks offsets[b] + Tn <= S on the host); D <= 256.
void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                              const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                              int64_t D, bool causal, float scale, cudaStream_t stream = 0);

// ---- attention (attention.cu, attention_gemm.cu) ---------------------------------------------------
// Same contract as kernels/cpu/attention.h; mask.segment_ids, when set, is a DEVICE pointer [B,T];
// lse [B,H,T] fp32. Two implementations, every mask type in both:
//   Flash: tiled over keys with an online softmax on CUDA cores; no [T,T] scores; D in {32, 64, 128}.
//   Gemm:  scores materialised per head in scratch (fp32) and the products on tensor cores through
//          cuBLASLt (bf16 in, fp32 accumulation); any D % 8 == 0; scratch ~12 bytes per score in the
//          backward (B*H*T*T scores).
//   Cudnn: cuDNN's fused SDPA (attention_cudnn.cpp, builds with the cuDNN frontend only) for bf16 with no
//          mask or the causal one, GQA, D % 8 == 0 up to cuDNN's limit; block-causal / segment masks and
//          fp32 fall back to Auto's choice of the two above. A shape cuDNN rejects throws its message.
//   Auto (default): Cudnn where it applies and cuDNN accepts the shape (when compiled in), else Gemm when
//   T % 8 == 0, D % 8 == 0 and its scratch fits MEGADLM_ATTENTION_GEMM_MAX_MB (default 8192), else Flash.
// The initial choice comes from env MEGADLM_ATTENTION=auto|cudnn|gemm|flash (read once, default auto).
enum class AttentionImpl : uint8_t { Auto, Flash, Gemm, Cudnn };
void set_attention_impl(AttentionImpl impl);  // process-wide (tests and benchmarks compare them)
AttentionImpl attention_impl();
bool attention_cudnn_compiled();  // true when this build has the cuDNN path (MEGADLM_HAVE_CUDNN_FRONTEND)
template <typename T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t Tn, int64_t H,
                       int64_t K, int64_t D, const AttentionMask& mask, float scale, cudaStream_t stream = 0);
// dq [B,T,H,D], dk, dv [B,T,K,D] written. Uses a scratch [B,H,T] fp32 allocated stream-ordered.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, int64_t B, int64_t Tn, int64_t H, int64_t K, int64_t D,
                        const AttentionMask& mask, float scale, cudaStream_t stream = 0);

// Two attentions of the same queries over disjoint key sets made one (attention_merge.cu;
// kernels/cpu/attention.h's contract): acc_out [B,T,H,D], acc_lse [B,H,T] merged with out, lse.
void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t T,
                     int64_t H, int64_t D, cudaStream_t stream = 0);
// rows pieces of `width` bytes, device to device, stream-ordered (attention_merge.cu: the ring's chunks).
void copy_2d_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                    cudaStream_t stream = 0);

// ---- MoE token permutation (moe.cu), the layout of nn/moe/moe_router.h's MoERouting -------------------
// rows [P,C] = x[token[p]] (* weight[p] when weight is not null); rows with token[p] < 0 (padding) = 0.
template <typename T>
void moe_permute(T* rows, const T* x, const int32_t* token, const float* weight, int64_t P, int64_t C,
                 cudaStream_t stream = 0);
// out [N,C] written: out[n] = sum over the rows p listed for n of (weight[p] or 1) * rows[p], in the
// order listed. The inverse index is CSR: token_rows[token_offsets[n] .. token_offsets[n+1]) are the rows
// of token n (build it on the host from MoERouting; ascending p gives Megatron's order). Deterministic.
template <typename T>
void moe_unpermute(T* out, const T* rows, const int32_t* token_offsets, const int32_t* token_rows,
                   const float* weight, int64_t N, int64_t C, cudaStream_t stream = 0);
// dweight [P] written: dweight[p] = dot(dout[token[p]], rows[p]) (0 for padding) -- the router-weight
// gradient of moe_unpermute; its input gradient is moe_permute of dout with the same weights.
template <typename T>
void moe_unpermute_weight_grad(float* dweight, const T* dout, const T* rows, const int32_t* token, int64_t P,
                               int64_t C, cudaStream_t stream = 0);

}  // namespace megadlm::cuda
