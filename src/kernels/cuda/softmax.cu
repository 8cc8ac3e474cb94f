// Softmax over rows and its backward (kernels/cpu/softmax.h): one block per row, the row's max and sums
// reduced over the block in a fixed order, so a row's bits do not depend on the launch.
#include "kernels/cuda/common.cuh"

namespace megadlm::cuda {

namespace {

constexpr int kThreads = 256;

// out [N, V] = softmax of inp [N, V] per row (may alias).
__global__ void softmax_forward_kernel(float* out, const float* inp, int64_t V) {
  __shared__ float scratch[32];
  const float* x = inp + blockIdx.x * V;
  float* y = out + blockIdx.x * V;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float e = expf(x[j] - mx);
    y[j] = e;
    sum += e;
  }
  const float inv = 1.0f / block_sum(sum, scratch);
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) y[j] *= inv;
}

// din [N, V] = out * (dout - rowsum(dout * out)) (may alias dout).
__global__ void softmax_backward_kernel(float* din, const float* out, const float* dout, int64_t V) {
  __shared__ float scratch[32];
  const float* y = out + blockIdx.x * V;
  const float* dy = dout + blockIdx.x * V;
  float* dx = din + blockIdx.x * V;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dot += dy[j] * y[j];
  dot = block_sum(dot, scratch);
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dx[j] = y[j] * (dy[j] - dot);
}

}  // namespace

void softmax_forward(float* out, const float* inp, int64_t N, int64_t V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  softmax_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(out, inp, V);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  softmax_backward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(din, out, dout, V);
  MEGADLM_CUDA_LAUNCH_CHECK();
}

}  // namespace megadlm::cuda
