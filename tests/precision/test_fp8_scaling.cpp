// FP8 delayed scaling: the scales follow the amax history exactly (both algorithms, margin,
// rollover), and quantisation round trips stay within the formats' error bounds.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/error.h"
#include "nn/fp8_scaling.h"
#include "test_util.h"

namespace megadlm {
namespace {

Fp8Recipe recipe(int64_t len, Fp8AmaxAlgo algo, int margin) {
  Fp8Recipe r;
  r.amax_history_len = len;
  r.amax_algo = algo;
  r.margin = margin;
  return r;
}

// The scale the recipe prescribes for a given amax, in double.
double expected_scale(double fp8max, double amax, int margin) { return fp8max / amax / std::ldexp(1.0, margin); }

TEST(Fp8Scaling, MaxAlgorithmOverTheHistoryWithRollover) {
  const std::vector<float> amaxes = {2.0f, 0.5f, 7.0f, 1.0f, 0.25f, 0.125f, 3.0f, 0.0625f};
  for (const int64_t L : {1, 3, 5}) {
    Fp8TensorScaling s(Fp8Kind::E4M3, recipe(L, Fp8AmaxAlgo::Max, 0));
    EXPECT_EQ(s.scale(), 1.0f) << "the first step uses scale 1 (no history yet)";
    for (size_t i = 0; i < amaxes.size(); ++i) {
      s.record(amaxes[i] / 2);  // two uses in a step: the step's amax is their max
      s.record(amaxes[i]);
      s.update();
      double window = 0;  // the last L steps, this one included
      for (size_t j = i + 1 >= static_cast<size_t>(L) ? i + 1 - L : 0; j <= i; ++j) window = std::fmax(window, amaxes[j]);
      EXPECT_FLOAT_EQ(s.scale(), static_cast<float>(expected_scale(448.0, window, 0))) << "L " << L << " step " << i;
      const std::vector<float> h = s.history();
      EXPECT_EQ(static_cast<int64_t>(h.size()), std::min<int64_t>(L, static_cast<int64_t>(i) + 2));
      EXPECT_EQ(h.back(), 0.0f) << "a fresh slot for the next step";
    }
  }
}

TEST(Fp8Scaling, MostRecentAlgorithmAndMargin) {
  const std::vector<float> amaxes = {2.0f, 0.5f, 7.0f, 1.0f};
  for (const int margin : {0, 1, 3}) {
    Fp8TensorScaling s(Fp8Kind::E5M2, recipe(16, Fp8AmaxAlgo::MostRecent, margin));
    for (float a : amaxes) {
      s.record(a);
      s.update();
      EXPECT_FLOAT_EQ(s.scale(), static_cast<float>(expected_scale(57344.0, a, margin))) << "margin " << margin;
    }
  }
}

TEST(Fp8Scaling, ZeroOrNonFiniteAmaxKeepsTheScale) {
  Fp8TensorScaling s(Fp8Kind::E4M3, recipe(1, Fp8AmaxAlgo::MostRecent, 0));
  s.record(4.0f);
  s.update();
  const float kept = s.scale();
  EXPECT_FLOAT_EQ(kept, 112.0f);
  s.update();  // nothing recorded: amax 0
  EXPECT_EQ(s.scale(), kept);
  s.record(std::numeric_limits<float>::quiet_NaN());
  s.record(1.0f);  // a NaN in the step is not hidden by a later finite value
  s.update();
  EXPECT_EQ(s.scale(), kept);
  s.record(std::numeric_limits<float>::infinity());
  s.update();
  EXPECT_EQ(s.scale(), kept);
}

// Quantise-dequantise with the delayed scale: relative error per element at most the format's half
// ulp (2^-4 for E4M3's 3 mantissa bits, 2^-3 for E5M2's 2) for values in the normal range, and an
// absolute error of at most half the smallest subnormal step below it.
void check_round_trip(Fp8Kind kind) {
  Fp8TensorScaling s(kind, recipe(4, Fp8AmaxAlgo::Max, 0));
  const int64_t n = 1237;
  const std::vector<float> x0 = test::random_vector(n, kind == Fp8Kind::E4M3 ? 11 : 12, -3.0f, 3.0f);
  std::vector<float> x = x0;
  s.record(3.0f);
  s.update();  // the scale for amax 3
  const float scale = fp8_quantize_dequantize(x.data(), n, s);
  EXPECT_EQ(scale, s.scale());
  const double rel = kind == Fp8Kind::E4M3 ? 1.0 / 16 : 1.0 / 8;
  const double min_normal = kind == Fp8Kind::E4M3 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -14);
  const double sub_step = kind == Fp8Kind::E4M3 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -16);
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x0[i]) * scale;
    const double q = static_cast<double>(x[i]) * scale;
    if (std::fabs(v) >= min_normal) ASSERT_LE(std::fabs(q - v), rel * std::fabs(v) * (1 + 1e-6)) << i;
    else ASSERT_LE(std::fabs(q - v), sub_step / 2 * (1 + 1e-6)) << i;
  }
  // The step's amax was recorded; values beyond the scaled range saturate to the format's max.
  std::vector<float> big = {1000.0f, -1000.0f};
  fp8_quantize_dequantize(big.data(), 2, s);
  EXPECT_FLOAT_EQ(big[0] * s.scale(), fp8_max(kind));
  EXPECT_FLOAT_EQ(big[1] * s.scale(), -fp8_max(kind));
  s.update();
  EXPECT_FLOAT_EQ(s.scale(), fp8_max(kind) / 1000.0f);
}

TEST(Fp8Scaling, RoundTripErrorE4M3) { check_round_trip(Fp8Kind::E4M3); }
TEST(Fp8Scaling, RoundTripErrorE5M2) { check_round_trip(Fp8Kind::E5M2); }

TEST(Fp8Scaling, FlagValues) {
  EXPECT_EQ(fp8_format_from_name("e4m3"), Fp8Format::E4M3);
  EXPECT_EQ(fp8_format_from_name("hybrid"), Fp8Format::Hybrid);
  EXPECT_THROW(fp8_format_from_name("e5m2"), Error);
  EXPECT_EQ(fp8_amax_algo_from_name("most_recent"), Fp8AmaxAlgo::MostRecent);
  EXPECT_THROW(fp8_amax_algo_from_name("mean"), Error);
  EXPECT_THROW(Fp8TensorScaling(Fp8Kind::E4M3, recipe(0, Fp8AmaxAlgo::Max, 0)), Error);
}

}  // namespace
}  // namespace megadlm
