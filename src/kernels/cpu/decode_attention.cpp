#include "kernels/cpu/decode_attention.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace megadlm::cpu {

void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                              const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                              int64_t D, bool causal, float scale) {
  MDLM_CHECK(K >= 1 && H % K == 0, "decode attention: kv heads ", K, " do not divide query heads ", H);
  for (int64_t b = 0; b < B; ++b)
    MDLM_CHECK(offsets[b] >= 0 && offsets[b] + Tn <= S, "decode attention: rows [", offsets[b], ", ",
               offsets[b] + Tn, ") of sequence ", b, " exceed the cache capacity ", S);
  const int64_t group = H / K;
  const int64_t tasks = B * Tn * H;
#pragma omp parallel
  {
    // Online softmax (running max m, running sum l, unnormalised accumulator), so no [S] scratch.
    std::vector<float> acc(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t h = task % H, i = (task / H) % Tn, b = task / (H * Tn);
      const int64_t g = h / group;
      const int64_t row = offsets[b] + i;
      const int64_t nkeys = causal ? row + 1 : offsets[b] + Tn;
      const float* qr = q + ((b * Tn + i) * H + h) * D;  // [D]
      float m = -INFINITY, l = 0.0f;
      for (int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
      for (int64_t j = 0; j < nkeys; ++j) {
        const float* kr = k_cache + ((b * S + j) * K + g) * D;  // [D]
        const float* vr = v_cache + ((b * S + j) * K + g) * D;  // [D]
        float s = 0.0f;
        for (int64_t d = 0; d < D; ++d) s += qr[d] * kr[d];
        s *= scale;
        if (s > m) {
          const float r = std::exp(m - s);  // 0 on the first key (m = -inf)
          l *= r;
          for (int64_t d = 0; d < D; ++d) acc[d] *= r;
          m = s;
        }
        const float p = std::exp(s - m);
        l += p;
        for (int64_t d = 0; d < D; ++d) acc[d] += p * vr[d];
      }
      float* o = out + ((b * Tn + i) * H + h) * D;  // [D]
      const float inv = l > 0 ? 1.0f / l : 0.0f;
      for (int64_t d = 0; d < D; ++d) o[d] = acc[d] * inv;
    }
  }
}

}  // namespace megadlm::cpu
