#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace megadlm::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which threads cost more than they save
}  // namespace

void softmax_forward(float* out, const float* inp, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * V;
    float* y = out + n * V;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) {
      y[j] = std::exp(x[j] - mx);
      sum += y[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < V; ++j) y[j] *= inv;
  }
}

void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* y = out + n * V;
    const float* dy = dout + n * V;
    float* dx = din + n * V;
    double dot = 0.0;
    for (int64_t j = 0; j < V; ++j) dot += static_cast<double>(dy[j]) * y[j];
    const float d = static_cast<float>(dot);
    for (int64_t j = 0; j < V; ++j) dx[j] = y[j] * (dy[j] - d);
  }
}

}  // namespace megadlm::cpu
