#include "kernels/cpu/moe_permute.h"

#include <cstring>

namespace megadlm::cpu {

// Below this many elements a loop runs on one thread: an OpenMP fork/join costs more than the work.
static constexpr int64_t kMinParallelWork = 1 << 14;

void moe_permute(float* rows, const float* x, const int32_t* token, const float* weight, int64_t P, int64_t C) {
#pragma omp parallel for schedule(static) if (P * C >= kMinParallelWork)
  for (int64_t p = 0; p < P; ++p) {
    float* r = rows + p * C;
    const int32_t n = token[p];
    if (n < 0) {
      std::memset(r, 0, sizeof(float) * static_cast<size_t>(C));
    } else if (!weight) {
      std::memcpy(r, x + static_cast<int64_t>(n) * C, sizeof(float) * static_cast<size_t>(C));
    } else {
      const float* xn = x + static_cast<int64_t>(n) * C;
      const float w = weight[p];
      for (int64_t c = 0; c < C; ++c) r[c] = w * xn[c];
    }
  }
}

void moe_unpermute(float* out, const float* rows, const int32_t* offsets, const int32_t* list, const float* weight,
                   int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * C;
    std::memset(o, 0, sizeof(float) * static_cast<size_t>(C));
    for (int32_t i = offsets[n]; i < offsets[n + 1]; ++i) {
      const int64_t p = list[i];
      const float* r = rows + p * C;
      if (weight) {
        const float w = weight[p];
        for (int64_t c = 0; c < C; ++c) o[c] += w * r[c];
      } else {
        for (int64_t c = 0; c < C; ++c) o[c] += r[c];
      }
    }
  }
}

void moe_unpermute_weight_grad(float* dweight, const float* dout, const float* rows, const int32_t* token, int64_t P,
                               int64_t C) {
#pragma omp parallel for schedule(static) if (P * C >= kMinParallelWork)
  for (int64_t p = 0; p < P; ++p) {
    const int32_t n = token[p];
    if (n < 0) {
      dweight[p] = 0.0f;
      continue;
    }
    const float* g = dout + static_cast<int64_t>(n) * C;
    const float* r = rows + p * C;
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) dot += static_cast<double>(g[c]) * r[c];
    dweight[p] = static_cast<float>(dot);
  }
}

}  // namespace megadlm::cpu
