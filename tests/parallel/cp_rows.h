#pragma once
// Context-parallel test helpers: the rows a cp rank holds of a whole-sequence tensor, the ring tests'
// inputs and document ids, and their comparison. Shared by tests/parallel (the ring against the whole
// sequence) and tests/cuda (the ring on a device against the CPU ring).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "core/philox.h"
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

// n values uniform in [-1, 1), counter-based on `seed`.
inline std::vector<float> cp_test_values(int64_t n, uint64_t seed) {
  const CounterRng rng(seed, RngPurpose::Test);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 2.0f * rng.uniform(static_cast<uint64_t>(i), 0) - 1.0f;
  return v;
}

// Document ids [B, S] of uneven documents (5 tokens each), cut at a different place in each sequence.
inline std::vector<int32_t> cp_test_documents(int64_t B, int64_t S) {
  std::vector<int32_t> segs(static_cast<size_t>(B * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) segs[static_cast<size_t>(b * S + i)] = static_cast<int32_t>((i + 3 * b) / 5);
  return segs;
}

// max |a - b| over the finite pairs; infinity when an infinite entry (an lse of a query that sees no
// key) is not matched exactly.
inline double cp_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

}  // namespace megadlm::test
