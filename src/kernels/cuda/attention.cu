// Scaled dot-product attention, forward and backward, with every mask of kernels/cpu/attention.h
// (bidirectional, causal, block-causal, per-document segments) and GQA. Flash-attention's algorithm on
// CUDA cores: keys are streamed through shared memory in tiles of 32 with an online softmax, so no
// [T, T] matrix exists; the backward recomputes probabilities from the saved log-sum-exp (FA2).
//
// Work split (all three kernels alike): a block of NW warps owns NW rows (queries for the forward and
// dq, keys for dk/dv), one warp per row. Within a tile, lane j computes the full dot product for the
// j-th key (or query) of the tile -- shared rows are padded to D+1 floats so the 32 lanes hit 32 banks --
// and then every lane accumulates its D/32 output columns (d = lane + 32 t) over the 32 tile entries,
// broadcast by shuffles. Each output element is written by exactly one thread in a fixed order: the
// backward needs no atomics and is bitwise reproducible.
//
// This is the portable kernel. It does not use tensor cores; a WMMA / wgmma version is the next step for
// speed, see docs/cuda.md. The entry points below route bf16 calls with no mask or the causal one to
// cuDNN's fused SDPA (attention_cudnn.cpp) when the build has the cuDNN frontend.
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_mask.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

constexpr int kTile = 32;  // keys (or queries) per shared-memory tile: one per lane
constexpr int kWarps = 8;  // rows per block

// rows [kTile, D] of x (row r = token r0 + r, head `head` of `heads`) into shared s (row stride ld),
// multiplied by `mul`; rows past Tn are zero.
template <typename T, int D>
__device__ __forceinline__ void load_tile(float* s, int ld, const T* x, int64_t b, int64_t r0, int64_t Tn, int64_t heads,
                                          int64_t head, float mul) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t t = r0 + r;
    s[r * ld + d] = t < Tn ? to_f32(x[((b * Tn + t) * heads + head) * D + d]) * mul : 0.0f;
  }
}

template <int D>
__device__ __forceinline__ float dot_row(const float* a, const float* b) {
  float s = 0.0f;
#pragma unroll 16
  for (int d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

// grid (ceil(T / kWarps), H, B); block kWarps * 32.
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, int64_t Tn, int64_t H, int64_t KH,
                             MaskDev mask, float scale) {
  constexpr int DPL = D / 32, LD = D + 1;
  __shared__ float ks[kTile * LD];
  __shared__ float vs[kTile * D];
  __shared__ float qs[kWarps][D];
  const int64_t b = blockIdx.z, h = blockIdx.y, kh = h / (H / KH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kWarps, i = i0 + warp;
  const bool active = i < Tn;
  const SegRows seg = segment_rows(mask, b, Tn);
  if (active)
    for (int d = lane; d < D; d += 32) qs[warp][d] = to_f32(q[((b * Tn + i) * H + h) * D + d]) * scale;
  float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) acc[t] = 0.0f;
  const int64_t kend = key_end(mask, min(Tn - 1, i0 + kWarps - 1), Tn);
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    load_tile<T, D>(ks, LD, k, b, j0, Tn, KH, kh, 1.0f);
    load_tile<T, D>(vs, D, v, b, j0, Tn, KH, kh, 1.0f);
    __syncthreads();
    if (!active) continue;
    const int64_t j = j0 + lane;
    const float s = (j < Tn && visible(mask, seg, i, j)) ? dot_row<D>(qs[warp], ks + lane * LD) : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));
    if (m_new == -INFINITY) continue;  // nothing visible yet
    const float corr = __expf(m - m_new);
    const float p = __expf(s - m_new);
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int t = 0; t < DPL; ++t) acc[t] *= corr;
#pragma unroll 8
    for (int jj = 0; jj < kTile; ++jj) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
      for (int t = 0; t < DPL; ++t) acc[t] += pj * vs[jj * D + lane + 32 * t];
    }
    m = m_new;
  }
  if (!active) return;
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int t = 0; t < DPL; ++t) out[((b * Tn + i) * H + h) * D + lane + 32 * t] = from_f32<T>(acc[t] * inv_l);
  if (lane == 0) lse[(b * H + h) * Tn + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// delta [B,H,T] = rowsum(dout * out): one warp per (b, t, h).
template <typename T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int64_t B, int64_t Tn, int64_t H,
                                       int64_t D) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= B * Tn * H) return;
  float s = 0.0f;
  for (int64_t d = lane; d < D; d += 32) s += to_f32(dout[row * D + d]) * to_f32(out[row * D + d]);
  s = warp_sum(s);
  const int64_t b = row / (Tn * H), t = row / H % Tn, h = row % H;
  if (lane == 0) delta[(b * H + h) * Tn + t] = s;
}

// dq: grid (ceil(T / kWarps), H, B). dq_i = scale * sum_j p_ij (dp_ij - delta_i) k_j.
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dq_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const float* lse, const float* delta,
                        int64_t Tn, int64_t H, int64_t KH, MaskDev mask, float scale) {
  constexpr int DPL = D / 32, LD = D + 1;
  __shared__ float ks[kTile * LD];
  __shared__ float vs[kTile * LD];
  __shared__ float qs[kWarps][D];
  __shared__ float dos[kWarps][D];
  const int64_t b = blockIdx.z, h = blockIdx.y, kh = h / (H / KH);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kWarps, i = i0 + warp;
  const SegRows seg = segment_rows(mask, b, Tn);
  float lse_i = -INFINITY, delta_i = 0.0f;
  if (i < Tn) {
    for (int d = lane; d < D; d += 32) {
      qs[warp][d] = to_f32(q[((b * Tn + i) * H + h) * D + d]) * scale;
      dos[warp][d] = to_f32(dout[((b * Tn + i) * H + h) * D + d]);
    }
    lse_i = lse[(b * H + h) * Tn + i];
    delta_i = delta[(b * H + h) * Tn + i];
  }
  const bool active = i < Tn && lse_i != -INFINITY;  // a query that saw no key has zero gradient
  float acc[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) acc[t] = 0.0f;
  const int64_t kend = key_end(mask, min(Tn - 1, i0 + kWarps - 1), Tn);
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    __syncthreads();
    load_tile<T, D>(ks, LD, k, b, j0, Tn, KH, kh, 1.0f);
    load_tile<T, D>(vs, LD, v, b, j0, Tn, KH, kh, 1.0f);
    __syncthreads();
    if (!active) continue;
    const int64_t j = j0 + lane;
    float ds = 0.0f;
    if (j < Tn && visible(mask, seg, i, j)) {
      const float p = __expf(dot_row<D>(qs[warp], ks + lane * LD) - lse_i);
      ds = p * (dot_row<D>(dos[warp], vs + lane * LD) - delta_i);
    }
#pragma unroll 8
    for (int jj = 0; jj < kTile; ++jj) {
      const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
      for (int t = 0; t < DPL; ++t) acc[t] += dsj * ks[jj * LD + lane + 32 * t];
    }
  }
  if (i >= Tn) return;
#pragma unroll
  for (int t = 0; t < DPL; ++t) dq[((b * Tn + i) * H + h) * D + lane + 32 * t] = from_f32<T>(acc[t] * scale);
}

// dk, dv: grid (ceil(T / kWarps), K, B); each warp owns one key row and walks the queries of the H/K
// heads sharing it. dv_j = sum_i p_ij do_i, dk_j = sum_i ds_ij (scale q_i).
template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dkv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                         const float* delta, int64_t Tn, int64_t H, int64_t KH, MaskDev mask, float scale) {
  constexpr int DPL = D / 32, LD = D + 1;
  __shared__ float qs[kTile * LD];
  __shared__ float dos[kTile * LD];
  __shared__ float lse_s[kTile], delta_s[kTile];
  __shared__ float kself[kWarps][D];
  __shared__ float vself[kWarps][D];
  const int64_t b = blockIdx.z, kh = blockIdx.y, group = H / KH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t j_min = static_cast<int64_t>(blockIdx.x) * kWarps, j = j_min + warp;
  const bool active = j < Tn;
  const SegRows seg = segment_rows(mask, b, Tn);
  if (active)
    for (int d = lane; d < D; d += 32) {
      kself[warp][d] = to_f32(k[((b * Tn + j) * KH + kh) * D + d]);
      vself[warp][d] = to_f32(v[((b * Tn + j) * KH + kh) * D + d]);
    }
  float dk_acc[DPL], dv_acc[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) dk_acc[t] = dv_acc[t] = 0.0f;
  const int64_t q_start = query_begin(mask, j_min) / kTile * kTile;
  for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
    for (int64_t i0 = q_start; i0 < Tn; i0 += kTile) {
      __syncthreads();
      load_tile<T, D>(qs, LD, q, b, i0, Tn, H, h, scale);
      load_tile<T, D>(dos, LD, dout, b, i0, Tn, H, h, 1.0f);
      if (threadIdx.x < kTile) {
        const int64_t i = i0 + threadIdx.x;
        lse_s[threadIdx.x] = i < Tn ? lse[(b * H + h) * Tn + i] : -INFINITY;
        delta_s[threadIdx.x] = i < Tn ? delta[(b * H + h) * Tn + i] : 0.0f;
      }
      __syncthreads();
      if (!active) continue;
      const int64_t i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i < Tn && lse_s[lane] != -INFINITY && visible(mask, seg, i, j)) {
        p = __expf(dot_row<D>(qs + lane * LD, kself[warp]) - lse_s[lane]);
        ds = p * (dot_row<D>(dos + lane * LD, vself[warp]) - delta_s[lane]);
      }
#pragma unroll 8
      for (int ii = 0; ii < kTile; ++ii) {
        const float pi = __shfl_sync(0xffffffffu, p, ii);
        const float dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
        for (int t = 0; t < DPL; ++t) {
          dv_acc[t] += pi * dos[ii * LD + lane + 32 * t];
          dk_acc[t] += dsi * qs[ii * LD + lane + 32 * t];
        }
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int t = 0; t < DPL; ++t) {
    dk[((b * Tn + j) * KH + kh) * D + lane + 32 * t] = from_f32<T>(dk_acc[t]);
    dv[((b * Tn + j) * KH + kh) * D + lane + 32 * t] = from_f32<T>(dv_acc[t]);
  }
}

template <typename T, int D>
void forward_d(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t Tn, int64_t H, int64_t K,
               MaskDev m, float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((Tn + kWarps - 1) / kWarps), static_cast<unsigned>(H), static_cast<unsigned>(B));
  attention_forward_kernel<Dev<T>, D><<<grid, kWarps * 32, 0, stream>>>(dev(out), lse, dev(q), dev(k), dev(v), Tn, H,
                                                                         K, m, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

template <typename T, int D>
void backward_d(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const float* lse,
                const float* delta, int64_t B, int64_t Tn, int64_t H, int64_t K, MaskDev m, float scale,
                cudaStream_t stream) {
  const unsigned rows = static_cast<unsigned>((Tn + kWarps - 1) / kWarps);
  attention_dq_kernel<Dev<T>, D><<<dim3(rows, static_cast<unsigned>(H), static_cast<unsigned>(B)), kWarps * 32, 0,
                                   stream>>>(dev(dq), dev(dout), dev(q), dev(k), dev(v), lse, delta, Tn, H, K, m, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
  attention_dkv_kernel<Dev<T>, D><<<dim3(rows, static_cast<unsigned>(K), static_cast<unsigned>(B)), kWarps * 32, 0,
                                    stream>>>(dev(dk), dev(dv), dev(dout), dev(q), dev(k), dev(v), lse, delta, Tn, H, K,
                                              m, scale);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace

#ifdef MEGADLM_HAVE_CUDNN_FRONTEND
// attention_cudnn.cpp: true when cuDNN ran the call; false when it declined and `required` is false.
bool attention_cudnn_forward(bf16_t* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v, int64_t B,
                             int64_t Tn, int64_t H, int64_t K, int64_t D, bool causal, float scale, bool required,
                             cudaStream_t stream);
bool attention_cudnn_backward(bf16_t* dq, bf16_t* dk, bf16_t* dv, const bf16_t* dout, const bf16_t* q, const bf16_t* k,
                              const bf16_t* v, const bf16_t* out, const float* lse, int64_t B, int64_t Tn, int64_t H,
                              int64_t K, int64_t D, bool causal, float scale, bool required, cudaStream_t stream);
#else
// Without the frontend cudnn_use never answers yes; these stubs keep the call sites unconditional.
inline bool attention_cudnn_forward(bf16_t*, float*, const bf16_t*, const bf16_t*, const bf16_t*, int64_t, int64_t,
                                    int64_t, int64_t, int64_t, bool, float, bool, cudaStream_t) {
  return false;
}
inline bool attention_cudnn_backward(bf16_t*, bf16_t*, bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*,
                                     const bf16_t*, const bf16_t*, const float*, int64_t, int64_t, int64_t, int64_t,
                                     int64_t, bool, float, bool, cudaStream_t) {
  return false;
}
#endif

namespace {

// -1 until first use; then env MEGADLM_ATTENTION decides, unless set_attention_impl came first.
std::atomic<int> g_impl{-1};

AttentionImpl impl_from_env() {
  const char* e = std::getenv("MEGADLM_ATTENTION");
  const std::string v = e ? e : "";
  if (v.empty() || v == "auto") return AttentionImpl::Auto;
  if (v == "cudnn") return AttentionImpl::Cudnn;
  if (v == "gemm") return AttentionImpl::Gemm;
  if (v == "flash") return AttentionImpl::Flash;
  fail("MEGADLM_ATTENTION=", v, " is not one of auto, cudnn, gemm, flash");
}

AttentionImpl current_impl() {
  int v = g_impl.load();
  if (v < 0) {
    int unset = -1;
    g_impl.compare_exchange_strong(unset, static_cast<int>(impl_from_env()));
    v = g_impl.load();
  }
  return static_cast<AttentionImpl>(v);
}

// cuDNN's fused SDPA (attention_cudnn.cpp) takes bf16 with no mask or the causal one, when the build has
// the frontend. Preferred (Auto) falls back when cuDNN declines the shape; Required (Cudnn) throws.
enum class CudnnUse { No, Preferred, Required };
CudnnUse cudnn_use(const char* who, const AttentionMask& mask, bool bf16) {
  const AttentionImpl impl = current_impl();
  if (impl != AttentionImpl::Auto && impl != AttentionImpl::Cudnn) return CudnnUse::No;
  MEGADLM_CHECK(impl != AttentionImpl::Cudnn || attention_cudnn_compiled(), who,
                ": AttentionImpl::Cudnn (MEGADLM_ATTENTION=cudnn) asked for, but this build has no cuDNN frontend "
                "(MEGADLM_HAVE_CUDNN_FRONTEND undefined; see docs/cuda.md, Build)");
  const bool applies = bf16 && mask.segment_ids == nullptr &&
                       (mask.type == MaskType::None || mask.type == MaskType::Causal);
  if (!applies || !attention_cudnn_compiled()) return CudnnUse::No;
  return impl == AttentionImpl::Cudnn ? CudnnUse::Required : CudnnUse::Preferred;
}

int64_t gemm_budget_bytes() {
  static const int64_t budget = [] {
    const char* e = std::getenv("MEGADLM_ATTENTION_GEMM_MAX_MB");
    return (e ? std::atoll(e) : 8192LL) << 20;
  }();
  return budget;
}

bool flash_supports(int64_t D) { return D == 32 || D == 64 || D == 128; }

// Auto: the tensor-core cuBLASLt path while its scratch fits the budget, the flash kernel otherwise.
bool use_gemm(const char* who, int64_t B, int64_t Tn, int64_t H, int64_t D, size_t elem) {
  // Cudnn reaches here only for what cuDNN lacks (masks, fp32): it then chooses as Auto does.
  const AttentionImpl impl = current_impl() == AttentionImpl::Cudnn ? AttentionImpl::Auto : current_impl();
  // Auto also wants 16-byte aligned rows of scores (T % 8 == 0) for cuBLASLt's tensor-core kernels.
  const bool fits = attention_gemm_scratch_bytes(B, Tn, H, elem) <= gemm_budget_bytes() && Tn % 8 == 0 && D % 8 == 0;
  if (impl == AttentionImpl::Gemm || (impl == AttentionImpl::Auto && fits)) {
    MEGADLM_CHECK(D % 8 == 0, who, ": head dim D=", D, " must be a multiple of 8 for the cuBLASLt path");
    return true;
  }
  MEGADLM_CHECK(flash_supports(D), who, ": head dim D=", D, " is not supported by the flash kernel (32, 64 or 128)",
                impl == AttentionImpl::Auto ? " and the cuBLASLt path does not apply (T % 8, D % 8 or its scratch over "
                                           "MEGADLM_ATTENTION_GEMM_MAX_MB)"
                                         : "");
  return false;
}

}  // namespace

MaskDev attention_check_args(const char* who, int64_t B, int64_t Tn, int64_t H, int64_t K, int64_t D,
                             const AttentionMask& mask) {
  MEGADLM_CHECK(B > 0 && Tn > 0 && H > 0 && K > 0 && D > 0, who, ": empty shape B=", B, " T=", Tn, " H=", H, " K=", K,
                " D=", D);
  MEGADLM_CHECK(H % K == 0, who, ": query heads H=", H, " not divisible by kv heads K=", K);
  MEGADLM_CHECK((mask.type != MaskType::BlockCausal && mask.type != MaskType::BlockDiffusion) || mask.block_size > 0,
                who, ": a block mask needs block_size > 0, got ", mask.block_size);
  MEGADLM_CHECK(mask.type != MaskType::BlockDiffusion || Tn % 2 == 0, who,
                ": BlockDiffusion needs an even T (the noised and the clean half), got T = ", Tn);
  MEGADLM_CHECK(Tn <= 65535LL * kWarps && H <= 65535 && B <= 65535, who, ": grid too large (B=", B, " T=", Tn, " H=", H, ")");
  MEGADLM_CHECK(mask.key_segment_ids == nullptr || mask.segment_ids != nullptr, who,
                ": the keys' segment ids need the queries' too");
  if (mask.type == MaskType::BlockDiffusion)
    return MaskDev{mask.type, std::min(mask.block_size, Tn / 2), mask.segment_ids, Tn / 2, mask.key_segment_ids};
  return MaskDev{mask.type, std::min(mask.block_size, Tn), mask.segment_ids, 0, mask.key_segment_ids};
}

void set_attention_impl(AttentionImpl impl) { g_impl.store(static_cast<int>(impl)); }
AttentionImpl attention_impl() { return current_impl(); }
bool attention_cudnn_compiled() {
#ifdef MEGADLM_HAVE_CUDNN_FRONTEND
  return true;
#else
  return false;
#endif
}

template <typename T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B, int64_t Tn, int64_t H,
                       int64_t K, int64_t D, const AttentionMask& mask, float scale, cudaStream_t stream) {
  const char* who = "cuda attention_forward";
  const MaskDev m = attention_check_args(who, B, Tn, H, K, D, mask);
  const CudnnUse cu = cudnn_use(who, mask, std::is_same_v<T, bf16_t>);
  if constexpr (std::is_same_v<T, bf16_t>)
    if (cu != CudnnUse::No && attention_cudnn_forward(out, lse, q, k, v, B, Tn, H, K, D, mask.type == MaskType::Causal,
                                                      scale, cu == CudnnUse::Required, stream))
      return;
  if (use_gemm(who, B, Tn, H, D, sizeof(T))) {
    attention_gemm_forward(out, lse, q, k, v, B, Tn, H, K, D, m, scale, stream);
    return;
  }
  if (D == 32) forward_d<T, 32>(out, lse, q, k, v, B, Tn, H, K, m, scale, stream);
  if (D == 64) forward_d<T, 64>(out, lse, q, k, v, B, Tn, H, K, m, scale, stream);
  if (D == 128) forward_d<T, 128>(out, lse, q, k, v, B, Tn, H, K, m, scale, stream);
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, int64_t B, int64_t Tn, int64_t H, int64_t K, int64_t D,
                        const AttentionMask& mask, float scale, cudaStream_t stream) {
  const char* who = "cuda attention_backward";
  const MaskDev m = attention_check_args(who, B, Tn, H, K, D, mask);
  const CudnnUse cu = cudnn_use(who, mask, std::is_same_v<T, bf16_t>);
  if constexpr (std::is_same_v<T, bf16_t>)
    if (cu != CudnnUse::No && attention_cudnn_backward(dq, dk, dv, dout, q, k, v, out, lse, B, Tn, H, K, D,
                                                       mask.type == MaskType::Causal, scale,
                                                       cu == CudnnUse::Required, stream))
      return;
  const bool gemm = use_gemm(who, B, Tn, H, D, sizeof(T));
  float* delta = stream_alloc<float>(B * H * Tn, stream);
  const int64_t rows = B * Tn * H;
  attention_delta_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(delta, dev(dout), dev(out), B, Tn,
                                                                                   H, D);
  MEGADLM_CUDA_LAUNCH_CHECK();
  if (gemm) attention_gemm_backward(dq, dk, dv, dout, q, k, v, lse, delta, B, Tn, H, K, D, m, scale, stream);
  else if (D == 32) backward_d<T, 32>(dq, dk, dv, dout, q, k, v, lse, delta, B, Tn, H, K, m, scale, stream);
  else if (D == 64) backward_d<T, 64>(dq, dk, dv, dout, q, k, v, lse, delta, B, Tn, H, K, m, scale, stream);
  else backward_d<T, 128>(dq, dk, dv, dout, q, k, v, lse, delta, B, Tn, H, K, m, scale, stream);
  MEGADLM_CUDA_CHECK(cudaFreeAsync(delta, stream));
}

#define MEGADLM_INSTANTIATE(T)                                                                                       \
  template void attention_forward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, \
                                     int64_t, const AttentionMask&, float, cudaStream_t);                    \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const float*,  \
                                      int64_t, int64_t, int64_t, int64_t, int64_t, const AttentionMask&,     \
                                      float, cudaStream_t);
MEGADLM_INSTANTIATE(float)
MEGADLM_INSTANTIATE(bf16_t)
#undef MEGADLM_INSTANTIATE

}  // namespace megadlm::cuda
