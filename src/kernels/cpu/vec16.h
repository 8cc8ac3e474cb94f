#pragma once
// 16-lane fp32 vectors (one AVX-512 register) as GCC vector extensions, for the CPU kernels that the
// compiler does not vectorise well from scalar code: the attention tiles and the pointwise activations.
// The same source compiles without AVX-512 (GCC splits the vectors) and computes the same formulas;
// with AVX-512 a few steps use intrinsics (exp2v: the same bits; expv and round_bf16_fast: see there).
// Internal to src/kernels/cpu.
//
// Chunked loops: a kernel walks n elements in chunks of 16; whole chunks load and store in place, the
// last partial chunk goes through zero-padded copies (load16n / store16n with m < 16), so every element
// is computed by the same vector code whatever n and the thread split are.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/vmath.h"

#if defined(__AVX512F__)
// GCC 12 warns that the placeholder of _mm512_undefined_*() in its intrinsics is (or "may be") used
// uninitialized once they are inlined; that is the intended undefined value, not a bug.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace megadlm::cpu::vec {

// Passing 64-byte vectors by value changes ABI on CPUs without AVX-512 (what -Wpsabi warns about);
// these helpers are internal and inlined, so it does not matter.
#pragma GCC diagnostic ignored "-Wpsabi"
using v16 = float __attribute__((vector_size(64)));
using vi16 = int32_t __attribute__((vector_size(64)));
using vu16 = uint32_t __attribute__((vector_size(64)));
using vh16 = uint16_t __attribute__((vector_size(32)));  // 16 bf16 bit patterns
// Unaligned, aliasing views for loads and stores from plain arrays.
using v16u = float __attribute__((vector_size(64), aligned(4), may_alias));
using vh16u = uint16_t __attribute__((vector_size(32), aligned(2), may_alias));

inline v16 load16(const float* p) { return *reinterpret_cast<const v16u*>(p); }
inline void store16(float* p, v16 x) { *reinterpret_cast<v16u*>(p) = x; }
inline v16 splat(float s) { return v16{s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s}; }
inline v16 vmax(v16 a, v16 b) { return a > b ? a : b; }
inline v16 vmin(v16 a, v16 b) { return a < b ? a : b; }

// The first m <= 16 elements (the rest zero), and their store.
inline v16 load16n(const float* p, int64_t m) {
  if (m == 16) return load16(p);
  alignas(64) float t[16] = {};
  std::memcpy(t, p, m * sizeof(float));
  return load16(t);
}
inline void store16n(float* p, v16 x, int64_t m) {
  if (m == 16) return store16(p, x);
  alignas(64) float t[16];
  store16(t, x);
  std::memcpy(p, t, m * sizeof(float));
}
inline vh16 loadh16n(const uint16_t* p, int64_t m) {
  if (m == 16) return *reinterpret_cast<const vh16u*>(p);
  alignas(32) uint16_t t[16] = {};
  std::memcpy(t, p, m * sizeof(uint16_t));
  return *reinterpret_cast<const vh16u*>(t);
}
inline void storeh16n(uint16_t* p, vh16 x, int64_t m) {
  if (m == 16) {
    *reinterpret_cast<vh16u*>(p) = x;
    return;
  }
  alignas(32) uint16_t t[16];
  *reinterpret_cast<vh16u*>(t) = x;
  std::memcpy(p, t, m * sizeof(uint16_t));
}

// bf16 -> fp32, exact.
inline v16 widen_bf16(vh16 h) { return (v16)(__builtin_convertvector(h, vu16) << 16); }
// fp32 -> bf16 bit for bit as f32_to_bf16 in core/dtype.h: round to nearest even, denormals kept, a
// NaN made quiet.
inline vh16 round_bf16(v16 x) {
  const vu16 u = (vu16)x;
  const vu16 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const vu16 quiet_nan = (u >> 16) | 0x40u;
  return __builtin_convertvector((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded, vh16);
}
// The same but for fp32 denormals (below 2^-126 in magnitude), which become zero where the CPU has
// AVX512-BF16: its conversion instruction (one instead of nine) flushes them, as oneDNN's bf16
// conversions and the bf16 attention do. For values that are never that small (activations).
inline vh16 round_bf16_fast(v16 x) {
#if defined(__AVX512BF16__)
  return (vh16)_mm512_cvtneps_pbh((__m512)x);
#else
  return round_bf16(x);
#endif
}

// 2^x, exactly 0 below 2^-126 (so a masked score, -inf, contributes nothing), saturating at 2^127 (finite)
// above 127; a NaN gives 0, so callers that must propagate NaN do it through another operand. Range
// reduction x = n + r, |r| <= 1/2, then a degree-5 polynomial for 2^r (coefficients fitted for relative
// error on [-1/2, 1/2]: at most 7.5e-8, under one float ulp).
inline v16 exp2v(v16 x) {
#if defined(__AVX512F__)
  // The same steps in fewer instructions, with the same bits: max / min select as the comparisons
  // below do (NaN gives the bound), roundscale rounds to nearest even as the shifter does, and scalef
  // multiplies by 2^n exactly as the built power does (one rounding, the same one).
  const __m512 xc = _mm512_min_ps(_mm512_max_ps((__m512)x, _mm512_set1_ps(-126.0f)), _mm512_set1_ps(127.0f));
  const __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(xc, n);
  __m512 p = _mm512_set1_ps(1.3276465e-03f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.6755419e-03f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.5507135e-02f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.4022120e-01f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.9314694e-01f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0000001e+00f));
  const __mmask16 keep = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
  return (v16)_mm512_maskz_scalef_ps(keep, p, n);
#else
  const vi16 keep = x >= -126.0f;
  x = vmin(vmax(x, splat(-126.0f)), splat(127.0f));
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  const v16 t = x + shifter;
  const v16 r = x - (t - shifter);
  // The low bits of t hold n; shifted into the exponent field with its bias they make 2^n.
  const v16 pow2n = (v16)(((vi16)t - (0x4B400000 - 127)) << 23);
  v16 p = splat(1.3276465e-03f);
  p = p * r + 9.6755419e-03f;
  p = p * r + 5.5507135e-02f;
  p = p * r + 2.4022120e-01f;
  p = p * r + 6.9314694e-01f;
  p = p * r + 1.0000001e+00f;
  return (v16)((vi16)(p * pow2n) & keep);
#endif
}

// exp(x) by vexp's method (vmath.h: Cody-Waite reduction by ln2, degree-7 Taylor polynomial, 2^k put in
// by scalef), within ~2 ulp on (-87.3, 88.3): 0 below (and for -inf), exp(88.3) above; NaN propagates.
// Not bitwise vexp (the compiler contracts the scalar form its own way), so a kernel uses one or the
// other throughout.
inline v16 expv(v16 x) {
#if defined(__AVX512F__)
  constexpr float kHi = 88.3f, kLo = -87.3f;
  // min_ps / max_ps return their second operand when one is NaN: x goes second so a NaN stays NaN.
  const __m512 xc = _mm512_max_ps(_mm512_set1_ps(kLo), _mm512_min_ps(_mm512_set1_ps(kHi), (__m512)x));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), xc);        // ln2_hi, exact in 9 bits
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440054690583e-4f), r);  // ln2_lo = ln2 - ln2_hi
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __mmask16 below = _mm512_cmp_ps_mask((__m512)x, _mm512_set1_ps(kLo), _CMP_LT_OQ);
  return (v16)_mm512_mask_blend_ps(below, _mm512_scalef_ps(p, k), _mm512_setzero_ps());
#else
  v16 y;
  for (int l = 0; l < 16; ++l) y[l] = vexp(x[l]);
  return y;
#endif
}

// The lanes' sum, in lane order (a fixed order: the bits depend on the inputs only).
inline float sum_lanes(v16 x) {
  float s = 0.0f;
  for (int l = 0; l < 16; ++l) s += x[l];
  return s;
}

}  // namespace megadlm::cpu::vec
