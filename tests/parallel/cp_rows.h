#pragma once
// Context-parallel test helper: the rows a cp rank holds of a whole-sequence tensor.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "nn/ring_attention.h"

namespace megadlm::test {

// Rank r's rows of a [B, S, W] tensor: chunks r and 2cp-1-r of every sequence -> [B, 2 S / 2cp, W].
inline std::vector<float> cp_rows_of(const std::vector<float>& full, int64_t B, int64_t S, int64_t W, int cp, int r) {
  const int64_t c = S / (2 * cp);
  std::vector<float> out(static_cast<size_t>(B * 2 * c * W));
  for (int64_t b = 0; b < B; ++b)
    for (int half = 0; half < 2; ++half) {
      const int64_t x = context_chunk(cp, r, half);
      std::copy(full.begin() + (b * S + x * c) * W, full.begin() + (b * S + (x + 1) * c) * W,
                out.begin() + (b * 2 + half) * c * W);
    }
  return out;
}

}  // namespace megadlm::test
