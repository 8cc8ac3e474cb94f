#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace megadlm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F8E4M3: return 1;
    case DType::F8E5M2: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U16: return 2;
    case DType::U8: return 1;
  }
  fail("unknown dtype code ", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F8E4M3: return "float8_e4m3";
    case DType::F8E5M2: return "float8_e5m2";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U16: return "uint16";
    case DType::U8: return "uint8";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::I32,
                  DType::I64, DType::U16, DType::U8})
    if (n == dtype_name(t)) return t;
  fail("unknown dtype '", n, "'");
}

// ---- fp16 ----------------------------------------------------------------------------------------
uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absu < 0x38800000u) {
    // Result is subnormal (or zero) in fp16: value = m * 2^-24 with m an integer, rounded to even.
    float a;
    std::memcpy(&a, &absu, 4);
    const float m = std::nearbyint(a * 16777216.0f);  // 2^24; default rounding mode is to-even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(m));
  }
  // Normal: rebias exponent 127 -> 15 and round the 23-bit mantissa to 10 bits, to nearest even.
  uint32_t r = absu - 0x38000000u;  // (127-15) << 23
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(man), -24);
    if (sign) out = -out;
    return out;
  }
  uint32_t u;
  if (exp == 31) u = sign | 0x7f800000u | (man << 13);
  else u = sign | ((exp + 112u) << 23) | (man << 13);
  std::memcpy(&out, &u, 4);
  return out;
}

// ---- fp8 -----------------------------------------------------------------------------------------
// Generic encoder for a 1-sign, E-exponent, M-mantissa format with the given bias, largest finite
// value and NaN code. Saturates finite overflow (and infinities) to +-max.
static uint8_t encode_fp8(float f, int ebits, int mbits, int bias, float maxv, uint8_t nan_code) {
  if (std::isnan(f)) return nan_code;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= maxv) a = maxv;
  if (a == 0.0f) return sign;
  int e;
  std::frexp(a, &e);            // a = fr * 2^e, fr in [0.5, 1)
  int exp_unbiased = e - 1;     // a = 1.m * 2^(e-1)
  const int min_normal = 1 - bias;
  int q_exp = exp_unbiased < min_normal ? min_normal : exp_unbiased;
  // Quantum at this exponent: 2^(q_exp - mbits). Round to nearest even in units of the quantum.
  float scaled = std::ldexp(a, mbits - q_exp);
  float q = std::nearbyint(scaled);
  if (q >= static_cast<float>(2 << mbits)) {  // mantissa overflowed into the next binade
    q_exp += 1;
    q = std::nearbyint(std::ldexp(a, mbits - q_exp));
  }
  const int iq = static_cast<int>(q);
  uint8_t code;
  if (iq < (1 << mbits)) {  // subnormal
    code = static_cast<uint8_t>(iq);
  } else {
    const int biased = q_exp + bias;
    code = static_cast<uint8_t>((biased << mbits) | (iq - (1 << mbits)));
  }
  (void)ebits;
  return sign | code;
}

static float decode_fp8(uint8_t v, int mbits, int bias) {
  const bool neg = v & 0x80;
  const int exp = (v & 0x7f) >> mbits;
  const int man = v & ((1 << mbits) - 1);
  float out = exp == 0 ? std::ldexp(static_cast<float>(man), 1 - bias - mbits)
                       : std::ldexp(static_cast<float>(man + (1 << mbits)), exp - bias - mbits);
  return neg ? -out : out;
}

uint8_t f32_to_e4m3(float f) { return encode_fp8(f, 4, 3, 7, kE4M3Max, 0x7f); }
float e4m3_to_f32(uint8_t v) {
  if ((v & 0x7f) == 0x7f) return NAN;
  return decode_fp8(v, 3, 7);
}
uint8_t f32_to_e5m2(float f) { return encode_fp8(f, 5, 2, 15, kE5M2Max, 0x7f); }
float e5m2_to_f32(uint8_t v) {
  const int exp = (v & 0x7f) >> 2;
  if (exp == 31) {
    if ((v & 3) == 0) return (v & 0x80) ? -INFINITY : INFINITY;
    return NAN;
  }
  return decode_fp8(v, 2, 15);
}

}  // namespace megadlm
