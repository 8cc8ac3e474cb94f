// The decode-attention kernel (new query rows against a key/value cache) against a naive
// double-precision softmax attention, on awkward sizes, with GQA, per-sequence offsets, causal and
// full visibility, and poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/decode_attention.h"
#include "core/error.h"
#include "test_util.h"

using namespace megadlm;
using namespace megadlm::test;

TEST(DecodeAttention, MatchesNaiveDoubleReference) {
  struct Case { int64_t B, Tn, S, H, K, D; bool causal; std::vector<int64_t> offsets; };
  const std::vector<Case> cases = {
      {1, 1, 9, 2, 2, 8, true, {8}},
      {3, 1, 17, 6, 2, 5, true, {0, 7, 16}},
      {2, 5, 13, 3, 1, 7, true, {0, 8}},
      {2, 4, 11, 4, 4, 3, false, {3, 7}},
      {1, 6, 6, 2, 1, 9, false, {0}},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    const std::vector<float> q = random_vector(c.B * c.Tn * c.H * c.D, seed++, -2.0f, 2.0f);
    const std::vector<float> k = random_vector(c.B * c.S * c.K * c.D, seed++, -2.0f, 2.0f);
    const std::vector<float> v = random_vector(c.B * c.S * c.K * c.D, seed++);
    std::vector<float> out(static_cast<size_t>(c.B * c.Tn * c.H * c.D), std::numeric_limits<float>::quiet_NaN());
    cpu::decode_attention_forward(out.data(), q.data(), k.data(), v.data(), c.offsets.data(), c.B, c.Tn, c.S, c.H, c.K,
                                  c.D, c.causal, scale);
    std::vector<double> ref(out.size());
    const int64_t g = c.H / c.K;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.Tn; ++i)
        for (int64_t h = 0; h < c.H; ++h) {
          const int64_t row = c.offsets[static_cast<size_t>(b)] + i;
          const int64_t n = c.causal ? row + 1 : c.offsets[static_cast<size_t>(b)] + c.Tn;
          std::vector<double> s(static_cast<size_t>(n));
          double mx = -1e300;
          for (int64_t j = 0; j < n; ++j) {
            double d = 0;
            for (int64_t e = 0; e < c.D; ++e)
              d += static_cast<double>(q[((b * c.Tn + i) * c.H + h) * c.D + e]) * k[((b * c.S + j) * c.K + h / g) * c.D + e];
            s[static_cast<size_t>(j)] = d * scale;
            mx = std::max(mx, d * scale);
          }
          double z = 0;
          for (double& x : s) z += x = std::exp(x - mx);
          for (int64_t e = 0; e < c.D; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < n; ++j) acc += s[static_cast<size_t>(j)] * v[((b * c.S + j) * c.K + h / g) * c.D + e];
            ref[static_cast<size_t>(((b * c.Tn + i) * c.H + h) * c.D + e)] = acc / z;
          }
        }
    for (float x : out) ASSERT_TRUE(std::isfinite(x)) << "an output element was not written";
    EXPECT_LT(max_rel_error(out, ref), 1e-5) << "B " << c.B << " Tn " << c.Tn << " causal " << c.causal;
  }
  // Rows past the capacity are refused.
  std::vector<float> q(8), kv(4 * 8), o(8);
  const int64_t off = 4;
  EXPECT_THROW(cpu::decode_attention_forward(o.data(), q.data(), kv.data(), kv.data(), &off, 1, 1, 4, 1, 1, 8, true, 1.0f),
               Error);
}
