// LayerNorm and RMSNorm over the last dimension, forward and backward.
// Legend: N rows (tokens, or tokens x heads for QK-norm), C normalised features.
//
// Threads split rows for everything computed per row (statistics, outputs, dinp), and split column
// blocks for the parameter gradients, whose sums over rows then always run in row order 0..N-1: the
// bits of dweight / dbias do not depend on the thread count. Per-row sums use `omp simd reduction`,
// a fixed (compile-time) lane order, so they vectorise without -ffast-math and stay deterministic.
//
// Both backwards accumulate the parameter gradients before writing dinp, so dinp may alias dout.
#include "kernels/cpu/norm.h"

#include <cmath>
#include <cstdint>

namespace megadlm::cpu {

namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which threads cost more than they save
constexpr int64_t kColBlock = 64;          // columns per thread-owned block of a parameter gradient

}  // namespace

// ---- LayerNorm ----------------------------------------------------------------------------------
// out [N,C], mean [N], rstd [N], inp [N,C], weight [C], bias [C] or null
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const float* x = inp + r * C;
    float* o = out + r * C;
    // Two passes: the mean first, then the variance about it (no E[x^2] - E[x]^2 cancellation).
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const float m = sum / static_cast<float>(C);
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) {
      const float d = x[c] - m;
      sq += d * d;
    }
    const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + eps);
    if (bias) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c];
    }
    mean[r] = m;
    rstd[r] = s;
  }
}

// With xhat = (x - mean) rstd and g = weight * dout (per row):
//   dinp    = rstd (g - mean_c(g) - xhat mean_c(g xhat))
//   dweight += sum_n dout xhat,  dbias += sum_n dout
// dinp [N,C] (written), dweight [C] (+=), dbias [C] (+=, or null), dout [N,C], inp [N,C], weight [C],
// mean [N], rstd [N]
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel if (N * C >= kParallelMin)
  {
    // Parameter gradients first (dinp may overwrite dout afterwards).
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kColBlock;
      const int64_t w = C - c0 < kColBlock ? C - c0 : kColBlock;
      double dw[kColBlock] = {}, db[kColBlock] = {};
      for (int64_t r = 0; r < N; ++r) {
        const float* x = inp + r * C + c0;
        const float* d = dout + r * C + c0;
        const float m = mean[r], s = rstd[r];
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) {
          dw[c] += d[c] * ((x[c] - m) * s);
          db[c] += d[c];
        }
      }
      for (int64_t c = 0; c < w; ++c) dweight[c0 + c] += static_cast<float>(dw[c]);
      if (dbias)
        for (int64_t c = 0; c < w; ++c) dbias[c0 + c] += static_cast<float>(db[c]);
    }
    // (implicit barrier)
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      const float* x = inp + r * C;
      const float* d = dout + r * C;
      float* di = dinp + r * C;
      const float m = mean[r], s = rstd[r];
      float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t c = 0; c < C; ++c) {
        const float g = weight[c] * d[c];
        sum_g += g;
        sum_gx += g * ((x[c] - m) * s);
      }
      const float mg = sum_g / static_cast<float>(C);
      const float mgx = sum_gx / static_cast<float>(C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * s;
        di[c] = s * (weight[c] * d[c] - mg - xhat * mgx);
      }
    }
  }
}

// ---- RMSNorm ------------------------------------------------------------------------------------
// out [N,C], rstd [N], inp [N,C], weight [C]
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const float* x = inp + r * C;
    float* o = out + r * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < C; ++c) sq += x[c] * x[c];
    const float s = 1.0f / std::sqrt(sq / static_cast<float>(C) + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    rstd[r] = s;
  }
}

// With xhat = x rstd and g = weight * dout (per row):
//   dinp    = rstd (g - xhat mean_c(g xhat))
//   dweight += sum_n dout xhat
// dinp [N,C] (written), dweight [C] (+=), dout [N,C], inp [N,C], weight [C], rstd [N]
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel if (N * C >= kParallelMin)
  {
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kColBlock;
      const int64_t w = C - c0 < kColBlock ? C - c0 : kColBlock;
      double dw[kColBlock] = {};
      for (int64_t r = 0; r < N; ++r) {
        const float* x = inp + r * C + c0;
        const float* d = dout + r * C + c0;
        const float s = rstd[r];
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) dw[c] += d[c] * (x[c] * s);
      }
      for (int64_t c = 0; c < w; ++c) dweight[c0 + c] += static_cast<float>(dw[c]);
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      const float* x = inp + r * C;
      const float* d = dout + r * C;
      float* di = dinp + r * C;
      const float s = rstd[r];
      float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
      for (int64_t c = 0; c < C; ++c) sum_gx += weight[c] * d[c] * (x[c] * s);
      const float mgx = sum_gx / static_cast<float>(C);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) di[c] = s * (weight[c] * d[c] - (x[c] * s) * mgx);
    }
  }
}

}  // namespace megadlm::cpu
