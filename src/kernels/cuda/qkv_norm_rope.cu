// Attention's input side in one pass each way (Qwen3-style layers: QK-norm, then RoPE), for a packed
// q|k|v projection: one product writes [N, (H + 2K) * D] and this kernel turns it into the attention's
// inputs; its backward writes the packed gradient that one weight-gradient and one input-gradient
// product take. Contract: kernels/cuda/ops.h. The same numbers as rmsnorm_forward then rope_forward on
// the q and k heads (kernels/cpu/norm.h, kernels/cpu/rope.h) and a copy of the v heads, without the
// rounding to T in between.
//
// A group of L lanes owns one head row of D = L * Pack::kN elements, one 16-byte pack per lane
// (row_groups.cuh; L in 8, 16, 32: D = 64, 128, 256 in bf16; 32, 64, 128 in fp32). RoPE pairs element i with i + D/2, which sits
// in lane lg ^ L/2 of the group. The backward sums the two norm weights' gradients as norm.cu's fast path
// does: per lane over the rows its group walks, groups in order, then blocks in a fixed order (no atomics).
// Legend: N tokens, H query heads, K kv heads, D head dim, R = H + 2K head rows per token.
#include "kernels/cuda/colreduce.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/row_groups.cuh"

namespace megadlm::cuda {

namespace {

// Which of q, k, v head row hr is, and its index among that kind's rows ([N, H] or [N, K] order).
struct HeadRow {
  int kind;     // 0 q, 1 k, 2 v
  int64_t idx;  // row of q [N*H], k or v [N*K]
  int64_t n;    // token
};
// 32-bit division (the host checks N * R < 2^31): a 64-bit one costs tens of instructions per row.
__device__ __forceinline__ HeadRow head_row(int64_t hr, int64_t H, int64_t K) {
  const uint32_t R = static_cast<uint32_t>(H + 2 * K), r32 = static_cast<uint32_t>(hr);
  const int64_t n = r32 / R, h = r32 % R;
  if (h < H) return {0, n * H + h, n};
  if (h < H + K) return {1, n * K + (h - H), n};
  return {2, n * K + (h - H - K), n};
}

// The rotation of one pack: lane lg holds elements lg*kV + j; `other` the partner half's (lane lg ^ L/2).
// sign +1: RoPE; sign -1: its inverse (the backward).
template <int L, int kV>
__device__ __forceinline__ void rotate(float* out, const float* x, const float* other, int lg, int64_t pos,
                                       const float* cos_t, const float* sin_t, float sign) {
  constexpr int kHalf = L * kV / 2;
  const bool first = lg < L / 2;
  const int64_t i0 = pos * kHalf + (first ? lg : lg - L / 2) * kV;  // frequency of element j: i0 + j
  float c[kV], s[kV];
  load_floats<kV>(c, cos_t + i0), load_floats<kV>(s, sin_t + i0);
#pragma unroll
  for (int j = 0; j < kV; ++j) out[j] = first ? x[j] * c[j] - other[j] * sign * s[j] : x[j] * c[j] + other[j] * sign * s[j];
}

template <typename T, int L>
__global__ void __launch_bounds__(kRowThreads)
    qkv_forward_kernel(T* q, T* k, T* v, float* rstd_q, float* rstd_k, const T* qkv, const float* wq, const float* wk,
                       const int32_t* positions, const float* cos_t, const float* sin_t, int64_t N, int64_t H,
                       int64_t K, float eps) {
  constexpr int kV = Pack<T>::kN, D = L * kV;
  const int lg = threadIdx.x % L;
  const int64_t hr = blockIdx.x * static_cast<int64_t>(kRowThreads / L) + threadIdx.x / L;
  const bool valid = hr < N * (H + 2 * K);  // every lane still takes part in the shuffles
  const HeadRow r = valid ? head_row(hr, H, K) : HeadRow{2, 0, 0};
  Pack<T> a{};
  if (valid) a = load_pack(qkv + hr * D + lg * kV);
  if (valid && r.kind == 2) store_pack(v + r.idx * D + lg * kV, a);
  float x[kV], y[kV], other[kV], o[kV];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kV; ++j) x[j] = to_f32(a.v[j]), ss += x[j] * x[j];
  const float rstd = rsqrtf(group_sum<L>(ss) / static_cast<float>(D) + eps);
  float w[kV];
  load_floats<kV>(w, (r.kind == 0 ? wq : wk) + lg * kV);
#pragma unroll
  for (int j = 0; j < kV; ++j) y[j] = r.kind == 2 ? 0.0f : x[j] * rstd * w[j];
#pragma unroll
  for (int j = 0; j < kV; ++j) other[j] = __shfl_xor_sync(0xffffffffu, y[j], L / 2, L);
  if (!valid || r.kind == 2) return;
  rotate<L, kV>(o, y, other, lg, positions[r.n], cos_t, sin_t, 1.0f);
  Pack<T> out;
#pragma unroll
  for (int j = 0; j < kV; ++j) out.v[j] = from_f32<T>(o[j]);
  store_pack((r.kind == 0 ? q : k) + r.idx * D + lg * kV, out);
  if (lg == 0) (r.kind == 0 ? rstd_q : rstd_k)[r.idx] = rstd;
}

// Each group walks rows_per_group consecutive head rows. partial [gridDim.x, 2, D]: the q and k norm
// weights' gradient sums of the block.
template <typename T, int L>
__global__ void __launch_bounds__(kRowThreads)
    qkv_backward_kernel(T* dqkv, float* partial, const T* dq, const T* dk, const T* dv, const T* qkv, const float* wq,
                        const float* wk, const float* rstd_q, const float* rstd_k, const int32_t* positions,
                        const float* cos_t, const float* sin_t, int64_t N, int64_t H, int64_t K,
                        int64_t rows_per_group) {
  constexpr int kV = Pack<T>::kN, D = L * kV, kGroups = kRowThreads / L;
  const int lg = threadIdx.x % L, group = threadIdx.x / L;
  float acc_q[kV] = {}, acc_k[kV] = {};
  const int64_t first = (blockIdx.x * static_cast<int64_t>(kGroups) + group) * rows_per_group;
  for (int64_t t = 0; t < rows_per_group; ++t) {  // the same trip count in every group: shuffles stay converged
    const int64_t hr = first + t;
    const bool valid = hr < N * (H + 2 * K);
    const HeadRow r = valid ? head_row(hr, H, K) : HeadRow{2, 0, 0};
    const T* src = r.kind == 0 ? dq : (r.kind == 1 ? dk : dv);
    Pack<T> d{}, a{};
    if (valid) d = load_pack(src + r.idx * D + lg * kV);
    if (valid && r.kind != 2) a = load_pack(qkv + hr * D + lg * kV);
    float dy[kV], other[kV], dz[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j) dy[j] = to_f32(d.v[j]);
#pragma unroll
    for (int j = 0; j < kV; ++j) other[j] = __shfl_xor_sync(0xffffffffu, dy[j], L / 2, L);
    const bool normed = valid && r.kind != 2;
    if (normed) rotate<L, kV>(dz, dy, other, lg, positions[r.n], cos_t, sin_t, -1.0f);
    else
#pragma unroll
      for (int j = 0; j < kV; ++j) dz[j] = 0.0f;
    // RMSNorm backward: dx = rstd * (g - xhat * mean(g * xhat)), g = dz * w, xhat = x * rstd.
    const float rstd = normed ? (r.kind == 0 ? rstd_q : rstd_k)[r.idx] : 0.0f;
    float w[kV], g[kV], xhat[kV], sgx = 0.0f;
    load_floats<kV>(w, (r.kind == 0 ? wq : wk) + lg * kV);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      xhat[j] = to_f32(a.v[j]) * rstd;
      g[j] = normed ? dz[j] * w[j] : 0.0f;
      sgx += g[j] * xhat[j];
    }
    const float mgx = group_sum<L>(sgx) / static_cast<float>(D);
    if (!valid) continue;
    Pack<T> out;
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      out.v[j] = from_f32<T>(normed ? rstd * (g[j] - xhat[j] * mgx) : dy[j]);
      if (normed && r.kind == 0) acc_q[j] += dz[j] * xhat[j];
      if (normed && r.kind == 1) acc_k[j] += dz[j] * xhat[j];
    }
    store_pack(dqkv + hr * D + lg * kV, out);
  }
  // The block's partial, its groups' sums added in group order.
  __shared__ float s[2][D];
  add_groups_in_order(group, kGroups, [&](bool first) {
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const int c = lg * kV + j;
      s[0][c] = (first ? 0.0f : s[0][c]) + acc_q[j];
      s[1][c] = (first ? 0.0f : s[1][c]) + acc_k[j];
    }
  });
  for (int c = threadIdx.x; c < 2 * D; c += kRowThreads) partial[blockIdx.x * 2 * D + c] = s[c / D][c % D];
}

// Calls f(std::integral_constant<int, L>) for the lane count whose single packs cover a head of D elements
// of T (row_groups.cuh's shapes with I = 1); throws naming `who` for any other D.
template <typename T, typename F>
void with_lanes(int64_t D, const char* who, F&& f) {
  bool one_pack = false;
  with_row_shape<T>(D, [&](auto l, auto i) {
    if constexpr (decltype(i)::value == 1) f(l), one_pack = true;
  });
  constexpr int kV = Pack<T>::kN;
  MEGADLM_CHECK(one_pack, who, ": head dim ", D, " not supported for this type (want ", 8 * kV, ", ", 16 * kV, " or ",
                32 * kV, ")");
}

}  // namespace

template <typename T>
void qkv_norm_rope_forward(T* q, T* k, T* v, float* rstd_q, float* rstd_k, const T* qkv, const float* q_norm_weight,
                           const float* k_norm_weight, const int32_t* positions, const float* cos, const float* sin,
                           int64_t N, int64_t H, int64_t K, int64_t D, float eps, cudaStream_t stream) {
  if (N <= 0) return;
  using Dv = Dev<T>;
  MEGADLM_CHECK(vec_ok<Dv>(D, {q, k, v, qkv}) && vec_ok<float>(D, {q_norm_weight, k_norm_weight, cos, sin}),
                "qkv_norm_rope_forward: tensors and tables must be 16-byte aligned");
  MEGADLM_CHECK(N * (H + 2 * K) < (int64_t{1} << 31), "qkv_norm_rope_forward: ", N * (H + 2 * K), " head rows (max 2^31 - 1)");
  with_lanes<Dv>(D, "qkv_norm_rope_forward", [&](auto l) {
    constexpr int L = decltype(l)::value;
    const int64_t rows = N * (H + 2 * K), per_block = kRowThreads / L;
    qkv_forward_kernel<Dv, L><<<static_cast<unsigned>((rows + per_block - 1) / per_block), kRowThreads, 0, stream>>>(
        dev(q), dev(k), dev(v), rstd_q, rstd_k, dev(qkv), q_norm_weight, k_norm_weight, positions, cos, sin, N, H, K,
        eps);
    MEGADLM_CUDA_LAUNCH_CHECK();
  });
}

template <typename T>
void qkv_norm_rope_backward(T* dqkv, float* dq_norm_weight, float* dk_norm_weight, const T* dq, const T* dk,
                            const T* dv, const T* qkv, const float* q_norm_weight, const float* k_norm_weight,
                            const float* rstd_q, const float* rstd_k, const int32_t* positions, const float* cos,
                            const float* sin, int64_t N, int64_t H, int64_t K, int64_t D, cudaStream_t stream) {
  if (N <= 0) return;
  using Dv = Dev<T>;
  MEGADLM_CHECK(vec_ok<Dv>(D, {dqkv, dq, dk, dv, qkv}) && vec_ok<float>(D, {q_norm_weight, k_norm_weight, cos, sin}),
                "qkv_norm_rope_backward: tensors and tables must be 16-byte aligned");
  MEGADLM_CHECK(N * (H + 2 * K) < (int64_t{1} << 31), "qkv_norm_rope_backward: ", N * (H + 2 * K), " head rows (max 2^31 - 1)");
  with_lanes<Dv>(D, "qkv_norm_rope_backward", [&](auto l) {
    constexpr int L = decltype(l)::value;
    const auto [rows_per_group, blocks] = group_walk(N * (H + 2 * K), kRowThreads / L);
    float* partial = stream_alloc<float>(blocks * 2 * D, stream);
    qkv_backward_kernel<Dv, L><<<static_cast<unsigned>(blocks), kRowThreads, 0, stream>>>(
        dev(dqkv), partial, dev(dq), dev(dk), dev(dv), dev(qkv), q_norm_weight, k_norm_weight, rstd_q, rstd_k,
        positions, cos, sin, N, H, K, rows_per_group);
    MEGADLM_CUDA_LAUNCH_CHECK();
    // partial rows alternate q, k: as [blocks, 2D] its first D columns are the q sums, the next D the k sums.
    col_finish_strided(dq_norm_weight, partial, blocks, D, 2 * D, stream);
    col_finish_strided(dk_norm_weight, partial + D, blocks, D, 2 * D, stream);
    MEGADLM_CUDA_CHECK(cudaFreeAsync(partial, stream));
  });
}

#define MEGADLM_INSTANTIATE(T)                                                                                         \
  template void qkv_norm_rope_forward<T>(T*, T*, T*, float*, float*, const T*, const float*, const float*,         \
                                         const int32_t*, const float*, const float*, int64_t, int64_t, int64_t,    \
                                         int64_t, float, cudaStream_t);                                            \
  template void qkv_norm_rope_backward<T>(T*, float*, float*, const T*, const T*, const T*, const T*, const float*, \
                                          const float*, const float*, const float*, const int32_t*, const float*,   \
                                          const float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
MEGADLM_INSTANTIATE(float)
MEGADLM_INSTANTIATE(bf16_t)
#undef MEGADLM_INSTANTIATE

}  // namespace megadlm::cuda
