// Token + position embedding over a vocabulary shard: forward exactness (a copy plus one add), zero
// rows for tokens another rank owns, shards that add up to the full table, the backward scatter
// against a double reference (itself checked by central differences), accumulation onto existing
// gradients, and bitwise thread-count independence with heavily repeated tokens.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::max_rel_error;
using megadlm::test::numerical_gradient;
using megadlm::test::random_vector;
using megadlm::test::to_double;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int n) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

// N ids uniform in [0, range), deterministic.
std::vector<int32_t> random_ids(int64_t N, int64_t range, uint64_t seed) {
  const std::vector<float> u = random_vector(N, seed, 0.0f, 1.0f);
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>(std::fmin(u[n] * range, range - 1));
  return ids;
}

// dwte [V,C] and dwpe [P,C] of sum(out * dout) in double, added onto the given starting values.
void backward_ref(std::vector<double>& dwte, std::vector<double>& dwpe, const std::vector<float>& dout,
                  const std::vector<int32_t>& tokens, int64_t vocab_start, int64_t V,
                  const std::vector<int32_t>& positions, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t row = tokens[n] - vocab_start;
    for (int64_t c = 0; c < C; ++c) {
      if (row >= 0 && row < V) dwte[row * C + c] += dout[n * C + c];
      if (!dwpe.empty()) dwpe[positions[n] * C + c] += dout[n * C + c];
    }
  }
}

}  // namespace

// Shard [vocab_start, vocab_start + V) of a 3V vocabulary: rows of other shards are zero (plus the
// position row), rows of this shard are exact copies (plus the position row, one fp32 add).
TEST(Embedding, ForwardShardRowsAndZeros) {
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}, {300, 130}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], C = s[1], V = 11, P = 17, vocab_start = 11;
    SCOPED_TRACE(::testing::Message() << "N = " << N << " C = " << C);
    const std::vector<float> wte = random_vector(V * C, 1 + C), wpe = random_vector(P * C, 2 + C);
    std::vector<int32_t> tokens = random_ids(N, 3 * V, 3 + N), positions = random_ids(N, P, 4 + N);
    tokens[0] = static_cast<int32_t>(vocab_start);  // both shard edges and both neighbours appear
    if (N > 3) {
      tokens[1] = static_cast<int32_t>(vocab_start + V - 1);
      tokens[2] = static_cast<int32_t>(vocab_start - 1);
      tokens[3] = static_cast<int32_t>(vocab_start + V);
    }
    for (bool with_pos : {false, true}) {
      std::vector<float> out(N * C, kNaN);
      cpu::embedding_forward(out.data(), tokens.data(), wte.data(), vocab_start, V, with_pos ? positions.data() : nullptr,
                             with_pos ? wpe.data() : nullptr, N, C);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t row = tokens[n] - vocab_start;
        const bool mine = row >= 0 && row < V;
        for (int64_t c = 0; c < C; ++c) {
          const float e = mine ? wte[row * C + c] : 0.0f;
          const float expect = with_pos ? e + wpe[positions[n] * C + c] : e;
          ASSERT_EQ(out[n * C + c], expect) << "token " << tokens[n] << " n " << n << " c " << c;
        }
      }
    }
  }
}

// Two shards' forwards add up to the single-rank forward over the whole table, and their backwards
// are the matching slices of the single-rank backward, bit for bit.
TEST(Embedding, VocabShardsComposeToTheFullTable) {
  const int64_t N = 33, C = 13, V = 20, half = 10;
  const std::vector<float> wte = random_vector(V * C, 5), dout = random_vector(N * C, 6);
  const std::vector<int32_t> tokens = random_ids(N, V, 7);
  std::vector<float> full(N * C, kNaN), lo(N * C, kNaN), hi(N * C, kNaN);
  cpu::embedding_forward(full.data(), tokens.data(), wte.data(), 0, V, nullptr, nullptr, N, C);
  cpu::embedding_forward(lo.data(), tokens.data(), wte.data(), 0, half, nullptr, nullptr, N, C);
  cpu::embedding_forward(hi.data(), tokens.data(), wte.data() + half * C, half, V - half, nullptr, nullptr, N, C);
  for (int64_t i = 0; i < N * C; ++i) {
    ASSERT_TRUE(lo[i] == 0.0f || hi[i] == 0.0f);  // each token lives in exactly one shard
    ASSERT_EQ(full[i], lo[i] + hi[i]);
  }
  std::vector<float> dfull(V * C, 0.0f), dlo(half * C, 0.0f), dhi((V - half) * C, 0.0f);
  cpu::embedding_backward(dfull.data(), nullptr, dout.data(), tokens.data(), 0, V, nullptr, N, C);
  cpu::embedding_backward(dlo.data(), nullptr, dout.data(), tokens.data(), 0, half, nullptr, N, C);
  cpu::embedding_backward(dhi.data(), nullptr, dout.data(), tokens.data(), half, V - half, nullptr, N, C);
  EXPECT_EQ(0, std::memcmp(dfull.data(), dlo.data(), half * C * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dfull.data() + half * C, dhi.data(), (V - half) * C * sizeof(float)));
}

// The reference scatter against central differences of sum(forward * dout) in double.
TEST(Embedding, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 7, C = 5, V = 6, P = 4, vocab_start = 2;
  std::vector<double> wte = to_double(random_vector(V * C, 8)), wpe = to_double(random_vector(P * C, 9));
  const std::vector<float> dout = random_vector(N * C, 10);
  const std::vector<int32_t> tokens = random_ids(N, V + 4, 11), positions = random_ids(N, P, 12);
  const auto loss = [&] {
    double s = 0.0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t row = tokens[n] - vocab_start;
        const double e = (row >= 0 && row < V) ? wte[row * C + c] : 0.0;
        s += (e + wpe[positions[n] * C + c]) * dout[n * C + c];
      }
    return s;
  };
  const std::vector<double> gte = numerical_gradient<double>(wte, loss, 1e-6);
  const std::vector<double> gpe = numerical_gradient<double>(wpe, loss, 1e-6);
  std::vector<double> rte(V * C, 0.0), rpe(P * C, 0.0);
  backward_ref(rte, rpe, dout, tokens, vocab_start, V, positions, N, C);
  for (int64_t i = 0; i < V * C; ++i) ASSERT_NEAR(gte[i], rte[i], 1e-8) << i;
  for (int64_t i = 0; i < P * C; ++i) ASSERT_NEAR(gpe[i], rpe[i], 1e-8) << i;
}

// The kernel's scatter accumulates onto existing gradients and matches the double reference.
TEST(Embedding, BackwardMatchesReference) {
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}, {300, 257}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], C = s[1], V = 9, P = 5, vocab_start = 4;
    SCOPED_TRACE(::testing::Message() << "N = " << N << " C = " << C);
    const std::vector<float> dout = random_vector(N * C, 13 + N);
    const std::vector<int32_t> tokens = random_ids(N, V + 8, 14 + N), positions = random_ids(N, P, 15 + N);
    std::vector<float> dwte = random_vector(V * C, 16), dwpe = random_vector(P * C, 17);
    std::vector<double> rte = to_double(dwte), rpe = to_double(dwpe);
    std::vector<float> dwte_nopos = dwte;
    backward_ref(rte, rpe, dout, tokens, vocab_start, V, positions, N, C);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), vocab_start, V, positions.data(), N,
                            C);
    EXPECT_LT(max_rel_error(dwte.data(), rte.data(), V * C), 1e-6);
    EXPECT_LT(max_rel_error(dwpe.data(), rpe.data(), P * C), 1e-6);
    // Without wpe the token gradient is the same.
    cpu::embedding_backward(dwte_nopos.data(), nullptr, dout.data(), tokens.data(), vocab_start, V, nullptr, N, C);
    EXPECT_EQ(dwte_nopos, dwte);
  }
}

// Many repeats of few tokens (the case where a row-parallel scatter would race): the same bits for
// 1, 2 and 3 threads (the column split changes with the thread count; the row order must not).
TEST(Embedding, BackwardIsThreadCountIndependent) {
  const int64_t N = 600, C = 300, V = 7, P = 3;
  const std::vector<float> dout = random_vector(N * C, 18, -3.0f, 3.0f);
  const std::vector<int32_t> tokens = random_ids(N, V, 19), positions = random_ids(N, P, 20);
  std::vector<float> dwte[3], dwpe[3];
  for (int t = 0; t < 3; ++t) {
    ThreadCount threads(t + 1);
    dwte[t].assign(V * C, 0.125f);
    dwpe[t].assign(P * C, -0.125f);
    cpu::embedding_backward(dwte[t].data(), dwpe[t].data(), dout.data(), tokens.data(), 0, V, positions.data(), N, C);
  }
  for (int t = 1; t < 3; ++t) {
    EXPECT_EQ(0, std::memcmp(dwte[0].data(), dwte[t].data(), V * C * sizeof(float))) << t + 1 << " threads";
    EXPECT_EQ(0, std::memcmp(dwpe[0].data(), dwpe[t].data(), P * C * sizeof(float))) << t + 1 << " threads";
  }
}
