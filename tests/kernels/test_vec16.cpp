// The 16-lane vector helpers of the CPU kernels (kernels/cpu/vec16.h), on whichever form this build has
// (one AVX-512 register, or a pair of AVX2 halves): the exponentials against double precision with their
// special values, the bf16 conversions bit for bit against core/dtype.h, select / vmax / vmin with NaN,
// and the partial loads and stores.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "kernels/cpu/vec16.h"

namespace megadlm::cpu {
namespace {

using vec::v16;

v16 lanes(const float* x) { return vec::load16(x); }

// Relative error of a against the double b, in units of fp32's epsilon.
double ulps(float a, double b) { return std::fabs(static_cast<double>(a) - b) / (std::fabs(b) * 0x1p-23); }

TEST(Vec16, Exp2vAndExpvFollowDoublePrecision) {
  double worst2 = 0, worst = 0;
  float x[16];
  for (int i = 0; i < 4000; ++i) {
    for (int l = 0; l < 16; ++l) x[l] = -120.0f + 0.00375f * static_cast<float>(16 * i + l);  // -120 .. 120
    float y2[16], y[16];
    vec::store16(y2, vec::exp2v(lanes(x)));
    for (int l = 0; l < 16; ++l) worst2 = std::fmax(worst2, ulps(y2[l], std::exp2(static_cast<double>(x[l]))));
    for (int l = 0; l < 16; ++l) x[l] *= 0.7f;  // -84 .. 84: inside expv's range
    vec::store16(y, vec::expv(lanes(x)));
    for (int l = 0; l < 16; ++l) worst = std::fmax(worst, ulps(y[l], std::exp(static_cast<double>(x[l]))));
  }
  EXPECT_LT(worst2, 2.0) << "exp2v";
  EXPECT_LT(worst, 4.0) << "expv";
}

TEST(Vec16, ExponentialsSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float x[16] = {-inf, -200.0f, -126.5f, 0.0f, 1.0f, 127.5f, 500.0f, inf,
                       nan,  -88.0f,  -87.0f,  88.0f, 89.0f, -1.0f, 0.5f, 2.0f};
  float e2[16], e[16];
  vec::store16(e2, vec::exp2v(lanes(x)));
  vec::store16(e, vec::expv(lanes(x)));
  // exp2v: 0 at and below -126 (a masked score contributes nothing), finite saturation above 127, NaN -> 0.
  EXPECT_EQ(e2[0], 0.0f);
  EXPECT_EQ(e2[1], 0.0f);
  EXPECT_EQ(e2[2], 0.0f);
  EXPECT_NEAR(e2[3], 1.0f, 2e-7f);  // the polynomial is within an ulp, not exact at 0
  EXPECT_NEAR(e2[4], 2.0f, 1e-6f);
  EXPECT_TRUE(std::isfinite(e2[5]) && e2[5] > 1e38f);
  EXPECT_TRUE(std::isfinite(e2[6]) && e2[6] > 1e38f);
  EXPECT_TRUE(std::isfinite(e2[7]) && e2[7] > 1e38f);
  EXPECT_EQ(e2[8], 0.0f);
  // expv: 0 below -87.3 and for -inf, a finite saturation above 88.3, NaN propagates.
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[1], 0.0f);
  EXPECT_EQ(e[9], 0.0f);
  EXPECT_GT(e[10], 0.0f);
  EXPECT_LT(ulps(e[10], std::exp(-87.0)), 4.0);
  EXPECT_LT(ulps(e[11], std::exp(88.0)), 4.0);
  EXPECT_TRUE(std::isfinite(e[12]) && e[12] > 1e38f);
  EXPECT_TRUE(std::isfinite(e[6]) && std::isfinite(e[7]));
  EXPECT_TRUE(std::isnan(e[8]));
  EXPECT_EQ(e[3], 1.0f);
}

TEST(Vec16, Bf16ConversionsAreBitExact) {
  // Bit patterns spread over every exponent, with denormals, infinities and NaNs (signalling ones too).
  std::vector<uint32_t> bits;
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t m : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x3fffffu, 0x400000u, 0x7fffffu})
      for (uint32_t sign : {0u, 1u}) bits.push_back(sign << 31 | e << 23 | m);
  while (bits.size() % 16) bits.push_back(0);
  for (size_t i = 0; i < bits.size(); i += 16) {
    float x[16];
    std::memcpy(x, bits.data() + i, sizeof x);
    uint16_t h[16];
    vec::storeh16n(h, vec::round_bf16(lanes(x)), 16);
    for (int l = 0; l < 16; ++l) ASSERT_EQ(h[l], f32_to_bf16(x[l])) << std::hex << bits[i + l];
    float w[16];
    vec::store16(w, vec::widen_bf16(vec::loadh16n(h, 16)));
    for (int l = 0; l < 16; ++l) {
      uint32_t got;
      std::memcpy(&got, w + l, sizeof got);
      ASSERT_EQ(got, static_cast<uint32_t>(h[l]) << 16) << "widen is exact";
    }
  }
}

TEST(Vec16, SelectMaxMinAndLanes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[16], b[16];
  for (int l = 0; l < 16; ++l) {
    a[l] = static_cast<float>(l) - 7.5f;
    b[l] = 7.5f - static_cast<float>(l);
  }
  a[3] = nan;
  float mx[16], mn[16], sel[16];
  vec::store16(mx, vec::vmax(lanes(a), lanes(b)));
  vec::store16(mn, vec::vmin(lanes(a), lanes(b)));
  vec::store16(sel, vec::select(lanes(a) > 0.0f, lanes(a), vec::splat(-1.0f)));
  for (int l = 0; l < 16; ++l) {
    if (l == 3) {
      // A NaN compares false: vmax(a, b) = a > b ? a : b and vmin likewise give b.
      EXPECT_EQ(mx[l], b[l]);
      EXPECT_EQ(mn[l], b[l]);
      EXPECT_EQ(sel[l], -1.0f);
      continue;
    }
    EXPECT_EQ(mx[l], std::fmax(a[l], b[l])) << l;
    EXPECT_EQ(mn[l], std::fmin(a[l], b[l])) << l;
    EXPECT_EQ(sel[l], a[l] > 0 ? a[l] : -1.0f) << l;
  }
  const v16 v = lanes(b);
  for (int l = 0; l < 16; ++l) EXPECT_EQ(v[l], b[l]) << "lane " << l;
  float lo[8], hi[8];
  const vec::v8 l8 = vec::lo8(v), h8 = vec::hi8(v);
  std::memcpy(lo, &l8, sizeof lo);
  std::memcpy(hi, &h8, sizeof hi);
  for (int l = 0; l < 8; ++l) {
    EXPECT_EQ(lo[l], b[l]);
    EXPECT_EQ(hi[l], b[l + 8]);
  }
  float s = 0;
  for (int l = 0; l < 16; ++l) s += b[l];
  EXPECT_EQ(vec::sum_lanes(v), s) << "lane order";
}

TEST(Vec16, PartialLoadsAndStoresTouchOnlyTheirLanes) {
  float src[16], dst[16];
  for (int l = 0; l < 16; ++l) src[l] = static_cast<float>(l + 1);
  for (int64_t m = 0; m <= 16; ++m) {
    float got[16];
    vec::store16(got, vec::load16n(src, m));
    for (int l = 0; l < 16; ++l) EXPECT_EQ(got[l], l < m ? src[l] : 0.0f) << "m " << m;
    for (float& d : dst) d = -5.0f;
    vec::store16n(dst, vec::load16(src) * 2.0f, m);
    for (int l = 0; l < 16; ++l) EXPECT_EQ(dst[l], l < m ? 2.0f * src[l] : -5.0f) << "m " << m;
  }
}

}  // namespace
}  // namespace megadlm::cpu
