// Attention through cuBLASLt with materialised scores: the tensor-core path of attention_forward /
// attention_backward (ops.h, AttentionImpl::Gemm). Per (batch, query head) the [T, T] scores live in
// scratch; the products run as strided-batched GEMMs (one call per batch row and position r inside the
// GQA group, batched over the K kv heads: query head h = g * (H/K) + r reads kv head g), and two row
// kernels do the masked softmax (forward) and dS = P * (dP - delta) (backward), with the same masks as the
// flash kernel. Like flash attention the forward saves only lse; the backward recomputes the scores.
//
// Forward:  S = Q K^T;  P = softmax(scale * S) (masked), lse;  O = P V
// Backward: S = Q K^T;  dP = dO V^T;  P, dS = P * (dP - delta);  dQ = scale dS K;  dK = scale dS^T Q;  dV = P^T dO
// with delta = rowsum(dO * O) from attention.cu. Under GQA dK, dV sum over the group in fp32 scratch.
#include "kernels/cuda/attention_mask.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

template <typename T> constexpr DType dtype_of() { return std::is_same_v<T, float> ? DType::F32 : DType::BF16; }

struct Dims {
  int64_t B, Tn, H, K, D;
  int64_t G() const { return H / K; }
  int64_t TT() const { return Tn * Tn; }
};

// One strided batch over the kv heads g of batch row b: X_h (rows of [T, heads*D] tensors, head h or g)
// against Y_g. `a_heads`/`b_heads` say whether an operand is indexed by query head (H) or kv head (K);
// scores-shaped operands ([B,H,T,T]) are flagged `scores`.
struct Operand {
  const void* base;
  enum Kind { QueryHeads, KvHeads, Scores } kind;
};

void batched(const Dims& d, int64_t b, int64_t r, bool ta, bool tb, int64_t M, int64_t N, int64_t Kdim, float alpha,
             float beta, Operand A, Operand Bop, Operand C, DType ab_type, DType c_type, cudaStream_t stream) {
  const int64_t G = d.G();
  const size_t ab = dtype_size(ab_type), cb = dtype_size(c_type);
  // (element offset of head/batch start, leading dim, stride between consecutive kv heads g)
  auto place = [&](const Operand& o, size_t elem, const void*& ptr, int64_t& ld, int64_t& stride) {
    int64_t off = 0;
    switch (o.kind) {
      case Operand::QueryHeads: off = (b * d.Tn * d.H + r) * d.D, ld = d.H * d.D, stride = G * d.D; break;
      case Operand::KvHeads: off = b * d.Tn * d.K * d.D, ld = d.K * d.D, stride = d.D; break;
      case Operand::Scores: off = (b * d.H + r) * d.TT(), ld = d.Tn, stride = G * d.TT(); break;
    }
    ptr = static_cast<const char*>(o.base) + off * static_cast<int64_t>(elem);
  };
  GemmArgs g;
  g.trans_a = ta, g.trans_b = tb, g.M = M, g.N = N, g.K = Kdim, g.alpha = alpha, g.beta = beta;
  g.a_type = g.b_type = ab_type, g.c_type = c_type;
  const void* c_ptr = nullptr;
  place(A, ab, g.A, g.lda, g.stride_a);
  place(Bop, ab, g.B, g.ldb, g.stride_b);
  place(C, cb, c_ptr, g.ldc, g.stride_c);
  g.C = const_cast<void*>(c_ptr);
  g.batch = d.K;
  gemm(g, stream);
}

// S [B,H,T,T] (fp32) = X_h Y_g^T for every head (X = Q or dO, Y = K or V).
template <typename T>
void head_products_nt(float* S, const T* x, const T* y, const Dims& d, cudaStream_t stream) {
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t r = 0; r < d.G(); ++r)
      batched(d, b, r, false, true, d.Tn, d.Tn, d.D, 1.0f, 0.0f, {x, Operand::QueryHeads}, {y, Operand::KvHeads},
              {S, Operand::Scores}, dtype_of<T>(), DType::F32, stream);
}

// Row kernels over the B*H*T score rows; row R = (b*H + h)*T + i, one block per row.
template <typename T, bool kVec>
__global__ void softmax_rows_kernel(T* P, float* lse, const float* S, int64_t Tn, int64_t H, MaskDev mask, float scale) {
  __shared__ float scratch[32];
  const int64_t R = blockIdx.x, i = R % Tn, b = R / Tn / H;
  const SegRows seg = segment_rows(mask, b, Tn);
  const float* s = S + R * Tn;
  T* p = P + R * Tn;
  constexpr int kN = kVec ? 4 : 1;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x * kN; j < Tn; j += blockDim.x * kN) {
    float v[kN];
    if constexpr (kVec) *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(s + j);
    else v[0] = s[j];
#pragma unroll
    for (int e = 0; e < kN; ++e)
      if (visible(mask, seg, i, j + e)) m = fmaxf(m, v[e] * scale);
  }
  const float M = block_max(m, scratch);
  float z = 0.0f;
  if (M != -INFINITY)
    for (int64_t j = threadIdx.x * kN; j < Tn; j += blockDim.x * kN) {
      float v[kN];
      if constexpr (kVec) *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(s + j);
      else v[0] = s[j];
#pragma unroll
      for (int e = 0; e < kN; ++e)
        if (visible(mask, seg, i, j + e)) z += __expf(v[e] * scale - M);
    }
  const float Z = block_sum(z, scratch);
  const float L = M == -INFINITY ? -INFINITY : M + logf(Z);
  if (threadIdx.x == 0) lse[R] = L;
  for (int64_t j = threadIdx.x * kN; j < Tn; j += blockDim.x * kN) {
    float v[kN];
    if constexpr (kVec) *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(s + j);
    else v[0] = s[j];
#pragma unroll
    for (int e = 0; e < kN; ++e)
      p[j + e] = from_f32<T>((L != -INFINITY && visible(mask, seg, i, j + e)) ? __expf(v[e] * scale - L) : 0.0f);
  }
}

// P = exp(scale * S - lse) (masked), dS = P * (dP - delta).
template <typename T, bool kVec>
__global__ void dscores_rows_kernel(T* P, T* dS, const float* S, const float* dP, const float* lse, const float* delta,
                                    int64_t Tn, int64_t H, MaskDev mask, float scale) {
  const int64_t R = blockIdx.x, i = R % Tn, b = R / Tn / H;
  const SegRows seg = segment_rows(mask, b, Tn);
  const float L = lse[R], dl = delta[R];
  constexpr int kN = kVec ? 4 : 1;
  for (int64_t j = threadIdx.x * kN; j < Tn; j += blockDim.x * kN) {
    float s[kN], g[kN];
    if constexpr (kVec) {
      *reinterpret_cast<float4*>(s) = *reinterpret_cast<const float4*>(S + R * Tn + j);
      *reinterpret_cast<float4*>(g) = *reinterpret_cast<const float4*>(dP + R * Tn + j);
    } else {
      s[0] = S[R * Tn + j];
      g[0] = dP[R * Tn + j];
    }
#pragma unroll
    for (int e = 0; e < kN; ++e) {
      const float p = (L != -INFINITY && visible(mask, seg, i, j + e)) ? __expf(s[e] * scale - L) : 0.0f;
      P[R * Tn + j + e] = from_f32<T>(p);
      dS[R * Tn + j + e] = from_f32<T>(p * (g[e] - dl));
    }
  }
}

template <typename T>
T* scratch_alloc(int64_t n, cudaStream_t stream) {
  return stream_alloc<T>(n, stream);
}

int row_threads(int64_t Tn) { return Tn >= 1024 ? 256 : (Tn >= 256 ? 128 : 64); }

}  // namespace

int64_t attention_gemm_scratch_bytes(int64_t B, int64_t Tn, int64_t H, size_t elem) {
  return B * H * Tn * Tn * static_cast<int64_t>(8 + 2 * elem);
}

template <typename T>
void attention_gemm_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t Tn, int64_t H,
                            int64_t K, int64_t D, const MaskDev& mask, float scale, cudaStream_t stream) {
  const Dims d{B, Tn, H, K, D};
  const int64_t n = B * H * d.TT();
  float* S = scratch_alloc<float>(n, stream);
  T* P = scratch_alloc<T>(n, stream);
  head_products_nt(S, q, k, d, stream);
  const bool vec = Tn % 4 == 0;
  const unsigned rows = static_cast<unsigned>(B * H * Tn);
  if (vec) softmax_rows_kernel<Dev<T>, true><<<rows, row_threads(Tn), 0, stream>>>(dev(P), lse, S, Tn, H, mask, scale);
  else softmax_rows_kernel<Dev<T>, false><<<rows, row_threads(Tn), 0, stream>>>(dev(P), lse, S, Tn, H, mask, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
  // O_h = P_h V_g
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < d.G(); ++r)
      batched(d, b, r, false, false, Tn, D, Tn, 1.0f, 0.0f, {P, Operand::Scores}, {v, Operand::KvHeads},
              {out, Operand::QueryHeads}, dtype_of<T>(), dtype_of<T>(), stream);
  MEGADLM_CUDA_CHECK(cudaFreeAsync(P, stream));
  MEGADLM_CUDA_CHECK(cudaFreeAsync(S, stream));
}

template <typename T>
void attention_gemm_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                             const float* delta, int64_t B, int64_t Tn, int64_t H, int64_t K, int64_t D,
                             const MaskDev& mask, float scale, cudaStream_t stream) {
  const Dims d{B, Tn, H, K, D};
  const int64_t n = B * H * d.TT();
  float* S = scratch_alloc<float>(n, stream);
  float* dP = scratch_alloc<float>(n, stream);
  T* P = scratch_alloc<T>(n, stream);
  T* dS = scratch_alloc<T>(n, stream);
  head_products_nt(S, q, k, d, stream);
  head_products_nt(dP, dout, v, d, stream);
  const unsigned rows = static_cast<unsigned>(B * H * Tn);
  if (Tn % 4 == 0)
    dscores_rows_kernel<Dev<T>, true><<<rows, row_threads(Tn), 0, stream>>>(dev(P), dev(dS), S, dP, lse, delta, Tn, H,
                                                                            mask, scale);
  else
    dscores_rows_kernel<Dev<T>, false><<<rows, row_threads(Tn), 0, stream>>>(dev(P), dev(dS), S, dP, lse, delta, Tn, H,
                                                                             mask, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
  const DType t = dtype_of<T>();
  // dQ_h = scale dS_h K_g
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < d.G(); ++r)
      batched(d, b, r, false, false, Tn, D, Tn, scale, 0.0f, {dS, Operand::Scores}, {k, Operand::KvHeads},
              {dq, Operand::QueryHeads}, t, t, stream);
  // dK_g = scale sum_r dS_h^T Q_h, dV_g = sum_r P_h^T dO_h; summed over the group in fp32 when G > 1.
  const bool direct = d.G() == 1 || std::is_same_v<T, float>;
  float* acc_k = direct ? nullptr : scratch_alloc<float>(B * Tn * K * D, stream);
  float* acc_v = direct ? nullptr : scratch_alloc<float>(B * Tn * K * D, stream);
  void* out_k = direct ? static_cast<void*>(dk) : acc_k;
  void* out_v = direct ? static_cast<void*>(dv) : acc_v;
  const DType ct = direct ? t : DType::F32;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < d.G(); ++r) {
      const float beta = r == 0 ? 0.0f : 1.0f;
      batched(d, b, r, true, false, Tn, D, Tn, scale, beta, {dS, Operand::Scores}, {q, Operand::QueryHeads},
              {out_k, Operand::KvHeads}, t, ct, stream);
      batched(d, b, r, true, false, Tn, D, Tn, 1.0f, beta, {P, Operand::Scores}, {dout, Operand::QueryHeads},
              {out_v, Operand::KvHeads}, t, ct, stream);
    }
  if (!direct) {
    cast_f32_to_bf16(reinterpret_cast<bf16_t*>(dk), acc_k, B * Tn * K * D, stream);
    cast_f32_to_bf16(reinterpret_cast<bf16_t*>(dv), acc_v, B * Tn * K * D, stream);
    MEGADLM_CUDA_CHECK(cudaFreeAsync(acc_v, stream));
    MEGADLM_CUDA_CHECK(cudaFreeAsync(acc_k, stream));
  }
  MEGADLM_CUDA_CHECK(cudaFreeAsync(dS, stream));
  MEGADLM_CUDA_CHECK(cudaFreeAsync(P, stream));
  MEGADLM_CUDA_CHECK(cudaFreeAsync(dP, stream));
  MEGADLM_CUDA_CHECK(cudaFreeAsync(S, stream));
}

#define MEGADLM_INSTANTIATE(T)                                                                                        \
  template void attention_gemm_forward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, int64_t,     \
                                          int64_t, int64_t, const MaskDev&, float, cudaStream_t);                  \
  template void attention_gemm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const float*,       \
                                           const float*, int64_t, int64_t, int64_t, int64_t, int64_t,              \
                                           const MaskDev&, float, cudaStream_t);
MEGADLM_INSTANTIATE(float)
MEGADLM_INSTANTIATE(bf16_t)
#undef MEGADLM_INSTANTIATE

}  // namespace megadlm::cuda
