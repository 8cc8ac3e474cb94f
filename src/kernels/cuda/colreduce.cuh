#pragma once
// Column sums in a fixed order, for parameter gradients (bias, norm weights): dst[c] += sum_n f(n, c).
// Rows are cut into chunks; a 32x8 block sums 32 columns of one chunk (each of 8 thread rows strides by 8,
// then the 8 partials are added in order) and a second kernel adds the chunk partials in a fixed order.
// No atomics, so the result is bitwise the same on every run.
#include "kernels/cuda/common.cuh"

namespace megadlm::cuda {

template <typename F>
__global__ void col_partial_kernel(float* partial, int64_t N, int64_t C, int64_t rows_per_chunk, F f) {
  __shared__ float acc[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = min(N, begin + rows_per_chunk);
  float s = 0.0f;
  if (c < C)
    for (int64_t n = begin + threadIdx.y; n < end; n += 8) s += f(n, c);
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
    for (int i = 0; i < 8; ++i) t += acc[i][threadIdx.x];
    partial[blockIdx.y * C + c] = t;
  }
}

// dst[c] += the chunk partials of column c. A 32x8 block: thread row y adds chunks y, y + 8, ... in order,
// then the 8 sums are added in y order. (A thread per column walking all chunks alone is latency-bound:
// 2048 columns make only 8 blocks of 256 threads, each walking every chunk.)
static __global__ void col_finish_kernel(float* dst, const float* partial, int64_t chunks, int64_t C, int64_t ld) {
  __shared__ float acc[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < C) {
#pragma unroll 4
    for (int64_t k = threadIdx.y; k < chunks; k += 8) s += partial[k * ld + c];
  }
  acc[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
    for (int i = 0; i < 8; ++i) t += acc[i][threadIdx.x];
    dst[c] += t;
  }
}
// partial [chunks, C], or rows of ld >= C floats of which the first C are summed (col_finish_strided).
inline void col_finish_strided(float* dst, const float* partial, int64_t chunks, int64_t C, int64_t ld,
                               cudaStream_t stream) {
  col_finish_kernel<<<static_cast<unsigned>((C + 31) / 32), dim3(32, 8), 0, stream>>>(dst, partial, chunks, C, ld);
  MEGADLM_CUDA_LAUNCH_CHECK();
}
inline void col_finish(float* dst, const float* partial, int64_t chunks, int64_t C, cudaStream_t stream) {
  col_finish_strided(dst, partial, chunks, C, C, stream);
}

// dst [C] += column sums of f over N rows. Scratch is allocated stream-ordered.
template <typename F>
void column_sum_accumulate(float* dst, int64_t N, int64_t C, F f, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int64_t rows_per_chunk = N <= 64 * 256 ? 64 : (N + 255) / 256;
  const int64_t chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  float* partial = stream_alloc<float>(chunks * C, stream);
  col_partial_kernel<<<dim3(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks)), dim3(32, 8), 0,
                       stream>>>(partial, N, C, rows_per_chunk, f);
  MEGADLM_CUDA_LAUNCH_CHECK();
  col_finish(dst, partial, chunks, C, stream);
  MEGADLM_CUDA_CHECK(cudaFreeAsync(partial, stream));
}

}  // namespace megadlm::cuda
