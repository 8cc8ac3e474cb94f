// Byte transpose (kernels/cpu/fp8_gemm.h's transpose_u8): the fp8 operands of a Linear layer's backward
// products, which cuBLASLt's fp8 kernels take only as C = A @ B^T. A block of 32 x 8 threads moves one
// 32 x 32 tile through shared memory, so that both the reads and the writes are row-contiguous.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

constexpr int kTile = 32, kRowsPerPass = 8;

// in [R, C] -> out [C, R]; blockIdx.x over column tiles, blockIdx.y over row tiles.
__global__ void transpose_u8_kernel(uint8_t* out, const uint8_t* in, int64_t R, int64_t C) {
  __shared__ uint8_t tile[kTile][kTile + 4];  // padded: the column reads hit distinct banks
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile, r0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[i][threadIdx.x] = in[r * C + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;  // out row c, column r
    if (c < C && r < R) out[c * R + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C, cudaStream_t stream) {
  if (R == 0 || C == 0) return;
  const int64_t tiles_c = (C + kTile - 1) / kTile, tiles_r = (R + kTile - 1) / kTile;
  MEGADLM_CHECK(tiles_r <= 65535, "cuda transpose_u8: ", R, " rows exceed the grid (", tiles_r, " row tiles)");
  const dim3 grid(static_cast<unsigned>(tiles_c), static_cast<unsigned>(tiles_r)), block(kTile, kRowsPerPass);
  transpose_u8_kernel<<<grid, block, 0, stream>>>(out, in, R, C);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace megadlm::cuda
