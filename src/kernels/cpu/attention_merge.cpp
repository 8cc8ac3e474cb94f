// The merge of two attentions over disjoint key sets (kernels/cpu/attention.h): context parallelism's
// ring combines each key chunk's partial result into the running one by their log-sum-exps.
// Legend: B batch, T query rows, H heads, D head dim.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention.h"

namespace megadlm::cpu {

void attention_merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t T,
                     int64_t H, int64_t D) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t li = (b * H + h) * T + i;
        const float l2 = lse[li];
        if (l2 == kNegInf) continue;
        float* o1 = acc_out + ((b * T + i) * H + h) * D;
        const float* o2 = out + ((b * T + i) * H + h) * D;
        const float l1 = acc_lse[li];
        if (l1 == kNegInf) {
          std::memcpy(o1, o2, sizeof(float) * static_cast<size_t>(D));
          acc_lse[li] = l2;
          continue;
        }
        const float mx = std::max(l1, l2);
        const float l = mx + std::log(std::exp(l1 - mx) + std::exp(l2 - mx));
        const float w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
        for (int64_t d = 0; d < D; ++d) o1[d] = w1 * o1[d] + w2 * o2[d];
        acc_lse[li] = l;
      }
}

}  // namespace megadlm::cpu
