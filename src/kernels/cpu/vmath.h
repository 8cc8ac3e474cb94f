#pragma once
// Vectorisable scalar math for the CPU kernels. glibc's expf is a scalar call that strict IEEE
// flags keep from vectorising; these are plain arithmetic that `omp simd` loops vectorise.
#include <bit>
#include <cstdint>

namespace megadlm::cpu {

// vexp's steps before the power of two, for a float or a GCC vector of floats F: the clamped argument
// xc, k = round(xc / ln2) by the shifter, and exp(xc - k ln2) by the polynomial; exp(xc) = p * 2^k.
constexpr float kExpHi = 88.3f, kExpLo = -87.3f;
template <class F>
inline F exp_reduced(F xc, F& k) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  k = (xc * 1.44269504088896341f + kShift) - kShift;
  F r = xc - k * 0.693359375f;           // ln2_hi = 355/512, exact in 9 bits
  r = r - k * -2.12194440054690583e-4f;  // ln2_lo = ln2 - ln2_hi
  F p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}

// exp(x) in fp32, within ~2 ulp of the correctly rounded value on (-87.3, 88.3).
// x = k ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2 so k*ln2_hi is exact), exp(r) by its
// Taylor series to degree 7 (truncation < 1e-8 relative), times 2^k built in the exponent bits.
// Below -87.3 the result is 0 (the true value is subnormal or smaller); above 88.3 it saturates at
// exp(88.3) ~ 2.2e38 (finite, so 1 / (1 + exp(x)) stays a clean 0). NaN propagates.
#pragma omp declare simd notinbranch
inline float vexp(float x) {
  float xc = x > kExpHi ? kExpHi : x;  // written as selects (not fmin/fmax) so a NaN stays NaN
  xc = xc < kExpLo ? kExpLo : xc;
  float k;
  const float p = exp_reduced(xc, k);
  const float scale = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  const float y = p * scale;
  return x < kExpLo ? 0.0f : y;
}

// sigmoid(x) = 1 / (1 + exp(-x)); exact 0 / 1 in the tails, no overflow.
#pragma omp declare simd notinbranch
inline float vsigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }

}  // namespace megadlm::cpu
