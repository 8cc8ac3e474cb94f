// Token embedding over one vocabulary shard, plus learned absolute positions.
// Legend: N tokens (B*T), C hidden, V rows of this rank's vocabulary shard, P position rows.
#include "kernels/cpu/embedding.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace megadlm::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which threads cost more than they save
constexpr int64_t kLine = 16;              // floats per 64-byte cache line
}  // namespace

// out [N,C], tokens [N], wte [V,C] (rows vocab_start .. vocab_start+V-1 of the full table),
// positions [N] or null, wpe [P,C] or null
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                       const int32_t* positions, const float* wpe, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * C;
    const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
    if (row >= 0 && row < V) {
      const float* e = wte + row * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = e[c];
    } else {
      // Another tensor-parallel rank owns this token; the all-reduce over the TP group adds its row.
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = 0.0f;
    }
    if (wpe) {
      const float* p = wpe + static_cast<int64_t>(positions[n]) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] += p[c];
    }
  }
}

// dwte [V,C] += scatter of dout rows by token (tokens outside the shard are skipped),
// dwpe [P,C] += scatter by position (when not null); dout [N,C], tokens [N], positions [N].
// A token repeated in the batch adds into the same row, so rows cannot be split between threads
// without atomics (whose float sums would depend on timing). Instead each thread owns a contiguous
// range of columns and walks the tokens in order 0..N-1: every element's sum has the same order for
// any thread count (how the columns are split does not matter, only that the row order is fixed).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t vocab_start,
                        int64_t V, const int32_t* positions, int64_t N, int64_t C) {
#pragma omp parallel if (N * C >= kParallelMin)
  {
    // Split at multiples of 16 floats (a 64-byte line) so that threads rarely write the same line.
    const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t lines = (C + kLine - 1) / kLine;
    const int64_t c0 = std::min(C, lines * id / threads * kLine);
    const int64_t c1 = std::min(C, lines * (id + 1) / threads * kLine);
    for (int64_t n = 0; n < N && c0 < c1; ++n) {
      const float* d = dout + n * C;
      const int64_t row = static_cast<int64_t>(tokens[n]) - vocab_start;
      if (row >= 0 && row < V) {
        float* g = dwte + row * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) g[c] += d[c];
      }
      if (dwpe) {
        float* g = dwpe + static_cast<int64_t>(positions[n]) * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) g[c] += d[c];
      }
    }
  }
}

}  // namespace megadlm::cpu
