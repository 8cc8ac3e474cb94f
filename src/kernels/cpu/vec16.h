#pragma once
// 16-lane fp32 vectors for the CPU kernels that the compiler does not vectorise well from scalar code:
// the attention tiles, the pointwise activations and the cross-entropy's exponentials.
//
// With AVX-512 a vector is one register, a GCC vector extension type, and a few steps use intrinsics
// (exp2v: the same bits; expv and round_bf16_fast: see there). Without it (AVX2) a vector is a pair of
// 8-lane halves (Pair below) with the same operators: GCC keeps a 64-byte vector extension value in
// memory where the CPU has no register that wide, so every operation would go through the stack (the
// attention would run at a small fraction of the GEMM rate, the cross-entropy's exponentials as a scalar
// call a lane; docs/bench/decisions.md). Kernels use only this header's API (arithmetic, comparisons,
// select, lane reads, the loads and stores), so one source serves both and computes the same formulas,
// lane by lane.
// Internal to src/kernels/cpu.
//
// Chunked loops: a kernel walks n elements in chunks of 16; whole chunks load and store in place, the
// last partial chunk goes through zero-padded copies (load16n / store16n with m < 16), so every element
// is computed by the same vector code whatever n and the thread split are.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
using vh16 = uint16_t __attribute__((vector_size(32)));  // 16 bf16 bit patterns (one AVX2 register)
using vh16u = uint16_t __attribute__((vector_size(32), aligned(2), may_alias));
using v8 = float __attribute__((vector_size(32)));
using v8u = float __attribute__((vector_size(32), aligned(4), may_alias));

#if defined(__AVX512F__)
using v16 = float __attribute__((vector_size(64)));
using vi16 = int32_t __attribute__((vector_size(64)));
using vu16 = uint32_t __attribute__((vector_size(64)));
// Unaligned, aliasing views for loads and stores from plain arrays.
using v16u = float __attribute__((vector_size(64), aligned(4), may_alias));

inline v16 load16(const float* p) { return *reinterpret_cast<const v16u*>(p); }
inline void store16(float* p, v16 x) { *reinterpret_cast<v16u*>(p) = x; }
inline v16 splat(float s) { return v16{s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s}; }
// Lanes of a where the mask (a comparison's result) is set, else of b.
inline v16 select(vi16 mask, v16 a, v16 b) { return mask ? a : b; }
// Lanes 0-7 and 8-15.
inline v8 lo8(v16 x) { return __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7); }
inline v8 hi8(v16 x) { return __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15); }
#else
using vi8 = int32_t __attribute__((vector_size(32)));
using vu8 = uint32_t __attribute__((vector_size(32)));

// A 16-lane vector as two 8-lane registers: lanes 0-7 in lo, 8-15 in hi. Every operator acts on both
// halves as the 16-lane operator acts on all lanes; a comparison gives a Pair of int masks (-1 / 0).
template <class H>
struct Pair {
  H lo, hi;
  auto operator[](int l) const { return l < 8 ? lo[l] : hi[l - 8]; }
  Pair& operator+=(Pair b) { return *this = {lo + b.lo, hi + b.hi}; }
  Pair& operator-=(Pair b) { return *this = {lo - b.lo, hi - b.hi}; }
  Pair& operator*=(Pair b) { return *this = {lo * b.lo, hi * b.hi}; }
};
template <class H>
using LaneOf = std::remove_cvref_t<decltype(H{}[0])>;

#define MEGADLM_VEC_PAIR_OP(op)                                                                   \
  template <class H>                                                                              \
  inline auto operator op(Pair<H> a, Pair<H> b) {                                                 \
    return Pair<decltype(a.lo op b.lo)>{a.lo op b.lo, a.hi op b.hi};                              \
  }                                                                                               \
  template <class H>                                                                              \
  inline auto operator op(Pair<H> a, LaneOf<H> s) {                                               \
    return Pair<decltype(a.lo op s)>{a.lo op s, a.hi op s};                                       \
  }                                                                                               \
  template <class H>                                                                              \
  inline auto operator op(LaneOf<H> s, Pair<H> b) {                                               \
    return Pair<decltype(s op b.lo)>{s op b.lo, s op b.hi};                                       \
  }
MEGADLM_VEC_PAIR_OP(+)
MEGADLM_VEC_PAIR_OP(-)
MEGADLM_VEC_PAIR_OP(*)
MEGADLM_VEC_PAIR_OP(/)
MEGADLM_VEC_PAIR_OP(&)
MEGADLM_VEC_PAIR_OP(<)
MEGADLM_VEC_PAIR_OP(>)
MEGADLM_VEC_PAIR_OP(<=)
MEGADLM_VEC_PAIR_OP(>=)
MEGADLM_VEC_PAIR_OP(==)
#undef MEGADLM_VEC_PAIR_OP
template <class H>
inline Pair<H> operator-(Pair<H> a) {
  return {-a.lo, -a.hi};
}

using v16 = Pair<v8>;
using vi16 = Pair<vi8>;

inline v8 load8(const float* p) { return *reinterpret_cast<const v8u*>(p); }
inline void store8(float* p, v8 x) { *reinterpret_cast<v8u*>(p) = x; }
inline v16 load16(const float* p) { return {load8(p), load8(p + 8)}; }
inline void store16(float* p, v16 x) {
  store8(p, x.lo);
  store8(p + 8, x.hi);
}
inline v16 splat(float s) { return {v8{s, s, s, s, s, s, s, s}, v8{s, s, s, s, s, s, s, s}}; }
inline v16 select(vi16 mask, v16 a, v16 b) { return {mask.lo ? a.lo : b.lo, mask.hi ? a.hi : b.hi}; }
inline v8 lo8(v16 x) { return x.lo; }
inline v8 hi8(v16 x) { return x.hi; }
#endif

inline v16 vmax(v16 a, v16 b) { return select(a > b, a, b); }
inline v16 vmin(v16 a, v16 b) { return select(a < b, a, b); }

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

// The bf16 rounding of fp32 bit patterns u (a vector of uint32 of any width), bit for bit as
// f32_to_bf16 in core/dtype.h: round to nearest even, denormals kept, a NaN made quiet.
template <class U>
inline U round_bf16_bits(U u) {
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const U quiet_nan = (u >> 16) | 0x40u;
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

#if defined(__AVX512F__)
// bf16 -> fp32, exact.
inline v16 widen_bf16(vh16 h) { return (v16)(__builtin_convertvector(h, vu16) << 16); }
// fp32 -> bf16 as f32_to_bf16 (above).
inline vh16 round_bf16(v16 x) { return __builtin_convertvector(round_bf16_bits((vu16)x), vh16); }
#else
using vh8 = uint16_t __attribute__((vector_size(16)));
inline v8 widen_bf16_half(vh8 h) { return (v8)(__builtin_convertvector(h, vu8) << 16); }
inline v16 widen_bf16(vh16 h) {
  return {widen_bf16_half(__builtin_shufflevector(h, h, 0, 1, 2, 3, 4, 5, 6, 7)),
          widen_bf16_half(__builtin_shufflevector(h, h, 8, 9, 10, 11, 12, 13, 14, 15))};
}
inline vh16 round_bf16(v16 x) {
  const vh8 lo = __builtin_convertvector(round_bf16_bits((vu8)x.lo), vh8);
  const vh8 hi = __builtin_convertvector(round_bf16_bits((vu8)x.hi), vh8);
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#endif
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
#if !defined(__AVX512F__)
// The generic steps on 8 lanes, defined below.
inline v8 exp2_lanes(v8 x);
inline v8 exp_lanes(v8 x);
#endif

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
  return {exp2_lanes(x.lo), exp2_lanes(x.hi)};
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
  return {exp_lanes(x.lo), exp_lanes(x.hi)};
#endif
}

#if !defined(__AVX512F__)
// exp2v's steps on 8 lanes: clamp (NaN gives the lower bound), round to an integer n by the shifter,
// the polynomial in r = x - n, times 2^n built in the exponent bits; 0 below -126.
inline v8 exp2_lanes(v8 x) {
  const vi8 keep = x >= -126.0f;
  x = x > -126.0f ? x : v8{} - 126.0f;
  x = x < 127.0f ? x : v8{} + 127.0f;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  const v8 t = x + shifter;
  const v8 r = x - (t - shifter);
  // The low bits of t hold n; shifted into the exponent field with its bias they make 2^n.
  const v8 pow2n = (v8)(((vi8)t - (0x4B400000 - 127)) << 23);
  v8 p = v8{} + 1.3276465e-03f;
  p = p * r + 9.6755419e-03f;
  p = p * r + 5.5507135e-02f;
  p = p * r + 2.4022120e-01f;
  p = p * r + 6.9314694e-01f;
  p = p * r + 1.0000001e+00f;
  return (v8)((vi8)(p * pow2n) & keep);
}

// vexp's steps (vmath.h) on 8 lanes: the clamp as selects (a NaN stays NaN and propagates), k by the
// shifter, the Cody-Waite reduction, the degree-7 polynomial, 2^k in the exponent bits; 0 below -87.3.
inline v8 exp_lanes(v8 x) {
  v8 xc = x > kExpHi ? v8{} + kExpHi : x;
  xc = xc < kExpLo ? v8{} + kExpLo : xc;
  v8 k;
  const v8 p = exp_reduced(xc, k);
  const v8 scale = (v8)((__builtin_convertvector(k, vi8) + 127) << 23);
  const v8 y = p * scale;
  return x < kExpLo ? v8{} : y;
}
#endif

// The lanes' sum, in lane order (a fixed order: the bits depend on the inputs only).
inline float sum_lanes(v16 x) {
  float s = 0.0f;
  for (int l = 0; l < 16; ++l) s += x[l];
  return s;
}

}  // namespace megadlm::cpu::vec
