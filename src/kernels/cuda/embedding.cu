// Token (vocab-sharded) and absolute-position embeddings (kernels/cpu/embedding.h).
// Forward: one thread per 4 columns (a float4 of the fp32 tables).
// Backward, token table: each block owns a range of table rows and of columns and walks all tokens in
// order, adding the gradient rows of the tokens in its range; a thread owns a column, so repeated tokens
// add up in token order without atomics (the same bits on every run). Position table: one thread per
// column walks the tokens in order (P is not passed, so its rows cannot be split the same way).
// The token table does not use the thread-per-column walk: a 2048-wide table would run on 16 blocks of
// 128 threads, each walking every token, which is latency-bound (docs/bench/decisions.md).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

template <typename T, int kN>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const float* wte, int64_t vocab_start,
                                         int64_t V, const int32_t* positions, const float* wpe, int64_t N, int64_t C) {
  const int64_t packs = C / kN, total = N * packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total; p += stride) {
    const int64_t n = p / packs, c = (p % packs) * kN;
    const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
    float v[kN];
    if (row >= 0 && row < V) {
      if constexpr (kN == 4) *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(wte + row * C + c);
      else v[0] = wte[row * C + c];
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] = 0.0f;
    }
    if (wpe) {
      const float* w = wpe + static_cast<int64_t>(positions[n]) * C + c;
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] += w[j];
    }
#pragma unroll
    for (int j = 0; j < kN; ++j) out[n * C + c + j] = from_f32<T>(v[j]);
  }
}

constexpr int64_t kRowsPerBlock = 1024;  // table rows per block
constexpr int kColsPerBlock = 256;       // one column per thread
constexpr int kBatch = 16;               // matches whose loads are issued together
constexpr int kTokenTile = 4096;         // token rows staged in shared memory at a time

// Block (b, s) owns table rows [b * kRowsPerBlock, (b + 1) * kRowsPerBlock) of the shard and columns
// [s * 256, (s + 1) * 256). The tokens' rows are staged in shared memory a tile at a time (a dependent
// global load per 32 tokens made every block latency-bound); each warp walks them 32 at a time and takes
// the matches in token order (ballot, lowest lane first), kBatch loads in flight at a time; a run of
// matches on one row is summed in a register and added to the table when the row changes (the diffusion
// mask token is about half of a batch: it must not cost a memory round trip per token).
template <typename T>
__global__ void __launch_bounds__(kColsPerBlock)
    token_table_backward_kernel(float* dwte, const T* dout, const int32_t* tokens, int64_t vocab_start, int64_t V,
                                int64_t N, int64_t C) {
  __shared__ int32_t tile[kTokenTile];
  const int64_t r0 = blockIdx.x * kRowsPerBlock, r1 = min(V, r0 + kRowsPerBlock);
  const int64_t c = blockIdx.y * static_cast<int64_t>(kColsPerBlock) + threadIdx.x;
  const bool has_col = c < C;  // lanes past C still take part in the ballots and shuffles
  const int lane = threadIdx.x & 31;
  int64_t cur = -1;  // the row being summed in acc
  float acc = 0.0f;
  for (int64_t t0 = 0; t0 < N; t0 += kTokenTile) {
    const int64_t tn = min(static_cast<int64_t>(kTokenTile), N - t0);
    __syncthreads();  // the previous tile is read by every warp
    for (int64_t i = threadIdx.x; i < tn; i += blockDim.x) {
      const int64_t row = static_cast<int64_t>(tokens[t0 + i]) - vocab_start;
      tile[i] = (row >= r0 && row < r1) ? static_cast<int32_t>(row - r0) : -1;  // this block's rows only
    }
    __syncthreads();
    for (int64_t w0 = 0; w0 < tn; w0 += 32) {
      const int32_t local = w0 + lane < tn ? tile[w0 + lane] : -1;
      unsigned hits = __ballot_sync(0xffffffffu, local >= 0);
      while (hits) {  // warp-uniform
        int j[kBatch];
        float g[kBatch];
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
          j[q] = hits ? __ffs(hits) - 1 : -1;
          if (hits) hits &= hits - 1;
        }
#pragma unroll
        for (int q = 0; q < kBatch; ++q)
          g[q] = (j[q] >= 0 && has_col) ? to_f32(dout[(t0 + w0 + j[q]) * C + c]) : 0.0f;
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
          if (j[q] < 0) break;
          const int64_t r = r0 + __shfl_sync(0xffffffffu, local, j[q]);
          if (r != cur) {
            if (cur >= 0 && has_col) dwte[cur * C + c] += acc;
            cur = r, acc = 0.0f;
          }
          acc += g[q];
        }
      }
    }
  }
  if (cur >= 0 && has_col) dwte[cur * C + c] += acc;
}

template <typename T>
__global__ void position_table_backward_kernel(float* dwpe, const T* dout, const int32_t* positions, int64_t N,
                                               int64_t C) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  for (int64_t n = 0; n < N; ++n) dwpe[static_cast<int64_t>(positions[n]) * C + c] += to_f32(dout[n * C + c]);
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                       const int32_t* positions, const float* wpe, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  if (C % 4 == 0 && reinterpret_cast<uintptr_t>(wte) % 16 == 0)
    embedding_forward_kernel<Dev<T>, 4><<<grid_for(N * C / 4, 256), 256, 0, stream>>>(dev(out), tokens, wte, vocab_start,
                                                                                       V, positions, wpe, N, C);
  else
    embedding_forward_kernel<Dev<T>, 1><<<grid_for(N * C, 256), 256, 0, stream>>>(dev(out), tokens, wte, vocab_start, V,
                                                                                   positions, wpe, N, C);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t vocab_start, int64_t V,
                        const int32_t* positions, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  if (V > 0) {
    const dim3 grid(static_cast<unsigned>((V + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>((C + kColsPerBlock - 1) / kColsPerBlock));
    token_table_backward_kernel<<<grid, kColsPerBlock, 0, stream>>>(dwte, dev(dout), tokens, vocab_start, V, N, C);
    MEGADLM_CUDA_LAUNCH_CHECK();
  }
  if (dwpe) {
    position_table_backward_kernel<<<static_cast<unsigned>((C + 127) / 128), 128, 0, stream>>>(dwpe, dev(dout),
                                                                                               positions, N, C);
    MEGADLM_CUDA_LAUNCH_CHECK();
  }
}

#define MEGADLM_INSTANTIATE(T)                                                                                      \
  template void embedding_forward<T>(T*, const int32_t*, const float*, int64_t, int64_t, const int32_t*,         \
                                     const float*, int64_t, int64_t, cudaStream_t);                              \
  template void embedding_backward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t, const int32_t*, \
                                      int64_t, int64_t, cudaStream_t);
MEGADLM_INSTANTIATE(float)
MEGADLM_INSTANTIATE(bf16_t)
#undef MEGADLM_INSTANTIATE

}  // namespace megadlm::cuda
