// Casts between fp32 and bf16 / fp16 / fp8: every element equals the scalar conversion of core/dtype.h
// (lengths above the threading threshold and awkward), round trips are exact where the format can hold
// the value, scales are applied before quantising, and fp8 saturates instead of overflowing.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

constexpr int64_t kN = 100003;  // above the threading threshold, not a multiple of any vector width

// Random values over many binades, with signs, zeros, NaN and infinities sprinkled in.
std::vector<float> wide_values(int64_t n, uint64_t seed) {
  const auto u = random_vector(n, seed, -1.0f, 1.0f);
  const auto e = random_vector(n, seed + 1, -20.0f, 20.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = u[i] * std::exp2(std::floor(e[i]));
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = NAN;
  x[3] = INFINITY;
  x[4] = -INFINITY;
  x[n - 1] = NAN;
  return x;
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, 4) == 0;
}

}  // namespace

TEST(Cast, Bf16MatchesScalarAndRoundTrips) {
  const auto x = wide_values(kN, 1);
  std::vector<uint16_t> q(kN, 0xdead);
  cpu::cast_f32_to_bf16(q.data(), x.data(), kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(q[i], f32_to_bf16(x[i])) << "at " << i;
  std::vector<float> back(kN, NAN);
  cpu::cast_bf16_to_f32(back.data(), q.data(), kN);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(same_bits(back[i], bf16_to_f32(q[i]))) << "at " << i;
    // Rounded to 8 significant bits: relative error at most 2^-9 for normal values.
    if (std::isfinite(x[i]) && std::fabs(x[i]) > 1e-30f) {
      ASSERT_LE(std::fabs(back[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << "at " << i;
    }
  }
  // bf16 -> f32 -> bf16 is the identity on the codes.
  std::vector<uint16_t> q2(kN);
  cpu::cast_f32_to_bf16(q2.data(), back.data(), kN);
  for (int64_t i = 0; i < kN; ++i) {
    if (std::isnan(back[i])) continue;
    ASSERT_EQ(q2[i], q[i]) << "at " << i;
  }

  std::vector<float> r = x;
  cpu::round_to_bf16(r.data(), kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_TRUE(same_bits(r[i], back[i])) << "at " << i;
}

TEST(Cast, F16WithScale) {
  const auto x = wide_values(kN, 2);
  for (float scale : {1.0f, 8.0f, 0.1f}) {
    std::vector<uint16_t> q(kN, 0xdead);
    cpu::cast_f32_to_f16(q.data(), x.data(), kN, scale);
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(q[i], f32_to_f16(x[i] * scale)) << "scale " << scale << " at " << i;
    std::vector<float> back(kN, NAN);
    cpu::cast_f16_to_f32(back.data(), q.data(), kN, 1.0f / scale);
    for (int64_t i = 0; i < kN; ++i)
      ASSERT_TRUE(same_bits(back[i], f16_to_f32(q[i]) * (1.0f / scale))) << "scale " << scale << " at " << i;
  }
  // Every fp16 code decodes and re-encodes to itself with scale 1.
  std::vector<uint16_t> codes(65536);
  for (int i = 0; i < 65536; ++i) codes[i] = static_cast<uint16_t>(i);
  std::vector<float> f(65536);
  std::vector<uint16_t> again(65536);
  cpu::cast_f16_to_f32(f.data(), codes.data(), 65536);
  cpu::cast_f32_to_f16(again.data(), f.data(), 65536);
  for (int i = 0; i < 65536; ++i) {
    if (std::isnan(f[i])) continue;
    ASSERT_EQ(again[i], codes[i]) << "code " << i;
  }
  // In place, round_to_f16 gives the value of the fp16 code (inf beyond 65504 in magnitude).
  std::vector<float> r = x;
  r[0] = 70000.0f;
  r[1] = -65520.0f;  // the first value that rounds to -inf
  r[2] = 65519.0f;   // still rounds to 65504
  cpu::round_to_f16(r.data(), kN);
  EXPECT_TRUE(std::isinf(r[0]) && r[0] > 0);
  EXPECT_TRUE(std::isinf(r[1]) && r[1] < 0);
  EXPECT_EQ(r[2], 65504.0f);
  for (int64_t i = 3; i < kN; ++i) ASSERT_TRUE(same_bits(r[i], f16_to_f32(f32_to_f16(x[i])))) << "at " << i;
}

// fp8: codes match the scalar conversion of x * scale; decoding multiplies by inv_scale; values beyond
// the format's range saturate to its largest finite value instead of becoming inf or NaN.
TEST(Cast, Fp8ScaleAndSaturation) {
  const auto x = wide_values(kN, 3);
  const float scale = 4.0f;
  std::vector<uint8_t> q(kN, 0x55);
  std::vector<float> back(kN, NAN);

  cpu::cast_f32_to_e4m3(q.data(), x.data(), kN, scale);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(q[i], f32_to_e4m3(x[i] * scale)) << "at " << i;
  cpu::cast_e4m3_to_f32(back.data(), q.data(), kN, 1.0f / scale);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(same_bits(back[i], e4m3_to_f32(q[i]) / scale)) << "at " << i;
    if (!std::isnan(x[i])) {
      ASSERT_FALSE(std::isnan(back[i])) << "at " << i;
      ASSERT_LE(std::fabs(back[i]), kE4M3Max / scale) << "at " << i;
    }
  }

  cpu::cast_f32_to_e5m2(q.data(), x.data(), kN, scale);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(q[i], f32_to_e5m2(x[i] * scale)) << "at " << i;
  cpu::cast_e5m2_to_f32(back.data(), q.data(), kN, 1.0f / scale);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(same_bits(back[i], e5m2_to_f32(q[i]) / scale)) << "at " << i;
    if (!std::isnan(x[i])) {
      ASSERT_LE(std::fabs(back[i]), kE5M2Max / scale) << "at " << i;
    }
  }

  // Explicit saturation: 200 * 4 = 800 > 448 comes back as 448 / 4 = 112; -1e30 as -112; inf as 112.
  const std::vector<float> big = {200.0f, -1e30f, INFINITY, 104.0f};  // 104 * 4 = 416 is an E4M3 value
  std::vector<uint8_t> qb(4);
  std::vector<float> fb(4);
  cpu::cast_f32_to_e4m3(qb.data(), big.data(), 4, scale);
  cpu::cast_e4m3_to_f32(fb.data(), qb.data(), 4, 1.0f / scale);
  EXPECT_EQ(fb, (std::vector<float>{112.0f, -112.0f, 112.0f, 104.0f}));
  const std::vector<float> huge = {1e5f, -3e38f};
  cpu::cast_f32_to_e5m2(qb.data(), huge.data(), 2, 1.0f);
  cpu::cast_e5m2_to_f32(fb.data(), qb.data(), 2, 1.0f);
  EXPECT_EQ(fb[0], kE5M2Max);
  EXPECT_EQ(fb[1], -kE5M2Max);
}

// Quantise-dequantise equals the two casts composed, and is within half a quantum of x in the normal
// range (3 mantissa bits for E4M3: relative 2^-4; 2 for E5M2: 2^-3).
TEST(Cast, Fp8QuantizeDequantize) {
  const auto u = random_vector(kN, 4, -1.0f, 1.0f);
  const float scale = 64.0f;  // |x * scale| <= 64: inside both formats' normal ranges for most x
  for (int fmt = 0; fmt < 2; ++fmt) {
    std::vector<float> x = u;
    if (fmt == 0) cpu::quantize_dequantize_e4m3(x.data(), kN, scale);
    else cpu::quantize_dequantize_e5m2(x.data(), kN, scale);
    const double rel = fmt == 0 ? 1.0 / 16 : 1.0 / 8;
    for (int64_t i = 0; i < kN; ++i) {
      const float expect = fmt == 0 ? e4m3_to_f32(f32_to_e4m3(u[i] * scale)) / scale
                                    : e5m2_to_f32(f32_to_e5m2(u[i] * scale)) / scale;
      ASSERT_TRUE(same_bits(x[i], expect)) << "fmt " << fmt << " at " << i;
      if (std::fabs(u[i] * scale) >= 1.0f) {  // comfortably normal in both formats
        ASSERT_LE(std::fabs(x[i] - u[i]), rel * std::fabs(u[i]) * 1.0000001) << "fmt " << fmt << " at " << i;
      }
    }
  }
}

TEST(Cast, SameBitsWhateverTheThreadCount) {
  const auto x = wide_values(kN, 5);
  std::vector<float> one = x, two = x;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::quantize_dequantize_e4m3(one.data(), kN, 2.0f);
  omp_set_num_threads(2);
  cpu::quantize_dequantize_e4m3(two.data(), kN, 2.0f);
  omp_set_num_threads(saved);
  for (int64_t i = 0; i < kN; ++i) ASSERT_TRUE(same_bits(one[i], two[i])) << "at " << i;
}

TEST(Cast, RejectsBadScales) {
  std::vector<float> x(4, 1.0f);
  std::vector<uint8_t> q(4);
  std::vector<uint16_t> h(4);
  EXPECT_THROW(cpu::cast_f32_to_e4m3(q.data(), x.data(), 4, 0.0f), Error);
  EXPECT_THROW(cpu::cast_f32_to_e5m2(q.data(), x.data(), 4, -1.0f), Error);
  EXPECT_THROW(cpu::cast_f32_to_f16(h.data(), x.data(), 4, NAN), Error);
  EXPECT_THROW(cpu::quantize_dequantize_e4m3(x.data(), 4, INFINITY), Error);
  EXPECT_THROW(cpu::cast_e4m3_to_f32(x.data(), q.data(), 4, 0.0f), Error);
}
