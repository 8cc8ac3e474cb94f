// The merge of two attentions over disjoint key sets (kernels/cpu/attention.h's attention_merge):
// context parallelism's ring combines each key chunk's partial result into the running one. One warp
// per query row and head; the lanes split the head dimension.
// Legend: B batch, T query rows, H heads, D head dim.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace megadlm::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void attention_merge_kernel(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B,
                                       int64_t T, int64_t H, int64_t D) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;  // (b, i, h)
  const int lane = threadIdx.x % 32;
  if (row >= B * T * H) return;
  const int64_t h = row % H, i = (row / H) % T, b = row / (H * T);
  const int64_t li = (b * H + h) * T + i;
  const float l2 = lse[li];
  if (l2 == -INFINITY) return;
  float* o1 = acc_out + row * D;
  const float* o2 = out + row * D;
  const float l1 = acc_lse[li];
  float w1 = 0.0f, w2 = 1.0f, l = l2;
  if (l1 != -INFINITY) {
    const float mx = fmaxf(l1, l2);
    l = mx + logf(expf(l1 - mx) + expf(l2 - mx));
    w1 = expf(l1 - l);
    w2 = expf(l2 - l);
  }
  for (int64_t d = lane; d < D; d += 32) o1[d] = l1 == -INFINITY ? o2[d] : w1 * o1[d] + w2 * o2[d];
  __syncwarp();
  if (lane == 0) acc_lse[li] = l;
}

}  // namespace

void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t T,
                     int64_t H, int64_t D, cudaStream_t stream) {
  const int64_t rows = B * T * H;
  if (rows == 0) return;
  MEGADLM_CHECK((rows + kWarpsPerBlock - 1) / kWarpsPerBlock <= 0x7fffffffLL, "cuda attention_merge: ", rows,
                " rows exceed the grid");
  const unsigned blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  attention_merge_kernel<<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(acc_out, acc_lse, out, lse, B, T, H, D);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

void copy_2d_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                    cudaStream_t stream) {
  if (width == 0 || rows == 0) return;
  MEGADLM_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace megadlm::cuda
