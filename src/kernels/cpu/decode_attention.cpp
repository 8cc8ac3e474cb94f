#include "kernels/cpu/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/vmath.h"

namespace megadlm::cpu {

void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                              const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                              int64_t D, bool causal, float scale) {
  MEGADLM_CHECK(K >= 1 && H % K == 0, "decode attention: kv heads ", K, " do not divide query heads ", H);
  for (int64_t b = 0; b < B; ++b)
    MEGADLM_CHECK(offsets[b] >= 0 && offsets[b] + Tn <= S, "decode attention: rows [", offsets[b], ", ",
                  offsets[b] + Tn, ") of sequence ", b, " exceed the cache capacity ", S);
  const int64_t group = H / K;
  constexpr int64_t kRows = 16;
  constexpr int64_t kJ = 16;      // keys per register block of scores  // query rows per task: they share one transposed copy of the keys
  const int64_t chunks = (Tn + kRows - 1) / kRows;
  const int64_t tasks = B * K * chunks;
#pragma omp parallel
  {
    // Per task (sequence b, kv head g, a chunk of query rows): the visible keys are transposed once
    // to kt [D, n] so that every query's scores are D contiguous axpy's over the keys (vectorised
    // over keys), then exp (vectorised) and the probability-weighted sum of value rows (vectorised
    // over D). The transpose costs n*D per chunk against kRows*group*n*D of products.
    std::vector<float> kt(static_cast<size_t>(D * (S + kJ)));
    std::vector<float> scores(static_cast<size_t>(S + kJ));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t c = task % chunks, g = (task / chunks) % K, b = task / (chunks * K);
      const int64_t i0 = c * kRows, i1 = std::min(Tn, i0 + kRows);
      const int64_t nmax = causal ? offsets[b] + i1 : offsets[b] + Tn;  // keys any row of the chunk sees
      float* ktp = kt.data();
      const int64_t ld = (nmax + kJ - 1) / kJ * kJ;  // kt row stride, padded with zeros to whole blocks
      for (int64_t j = 0; j < nmax; ++j) {
        const float* kr = k_cache + ((b * S + j) * K + g) * D;  // [D]
        for (int64_t d = 0; d < D; ++d) ktp[d * ld + j] = kr[d];
      }
      for (int64_t d = 0; d < D; ++d)
        for (int64_t j = nmax; j < ld; ++j) ktp[d * ld + j] = 0.0f;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t n = causal ? offsets[b] + i + 1 : nmax;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qr = q + ((b * Tn + i) * H + h) * D;  // [D]
          float* sc = scores.data();
          // Scores in blocks of kJ keys held in registers across the whole D loop.
          for (int64_t j0 = 0; j0 < n; j0 += kJ) {
            float acc[kJ] = {};
            for (int64_t d = 0; d < D; ++d) {
              const float qd = qr[d] * scale;
              const float* row = ktp + d * ld + j0;
#pragma omp simd
              for (int64_t jj = 0; jj < kJ; ++jj) acc[jj] += qd * row[jj];
            }
            for (int64_t jj = 0; jj < kJ; ++jj) sc[j0 + jj] = acc[jj];
          }
          float m = -INFINITY;
          for (int64_t j = 0; j < n; ++j) m = sc[j] > m ? sc[j] : m;
          float l = 0.0f;
#pragma omp simd reduction(+ : l)
          for (int64_t j = 0; j < n; ++j) {
            sc[j] = vexp(sc[j] - m);
            l += sc[j];
          }
          float* o = out + ((b * Tn + i) * H + h) * D;  // [D]
          // out = sum_j p_j v_j in blocks of kJ head-dim lanes held in registers across the keys.
          for (int64_t d0 = 0; d0 < D; d0 += kJ) {
            const int64_t w = std::min(kJ, D - d0);
            float acc[kJ] = {};
            if (w == kJ) {
              for (int64_t j = 0; j < n; ++j) {
                const float* vr = v_cache + ((b * S + j) * K + g) * D + d0;  // [kJ]
                const float p = sc[j];
#pragma omp simd
                for (int64_t dd = 0; dd < kJ; ++dd) acc[dd] += p * vr[dd];
              }
            } else {
              for (int64_t j = 0; j < n; ++j) {
                const float* vr = v_cache + ((b * S + j) * K + g) * D + d0;  // [w]
                const float p = sc[j];
                for (int64_t dd = 0; dd < w; ++dd) acc[dd] += p * vr[dd];
              }
            }
            for (int64_t dd = 0; dd < w; ++dd) o[d0 + dd] = acc[dd];
          }
          const float inv = 1.0f / l;  // l >= 1: the maximum key contributes exp(0)
          for (int64_t d = 0; d < D; ++d) o[d] *= inv;
        }
      }
    }
  }
}

}  // namespace megadlm::cpu
