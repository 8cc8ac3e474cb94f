#pragma once
// Element types and the scalar conversions between fp32 and the narrow float formats.
// bf16 / fp16 conversions round to nearest even; fp8 conversions saturate to the largest finite
// value (as Transformer Engine does), NaN stays NaN.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace megadlm {

enum class DType : uint8_t { F32, BF16, F16, F8E4M3, F8E5M2, I32, I64, U16, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);        // "float32", "bfloat16", ...
DType dtype_from_name(const std::string& name);  // accepts our names; throws Error naming the value

// ---- bf16: the upper 16 bits of an fp32 --------------------------------------------------------
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- fp16 (IEEE binary16) ------------------------------------------------------------------------
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

// ---- fp8 (OCP FP8: E4M3 max 448 with no infinities, E5M2 max 57344 with infinities) --------------
uint8_t f32_to_e4m3(float f);
float e4m3_to_f32(uint8_t v);
uint8_t f32_to_e5m2(float f);
float e5m2_to_f32(uint8_t v);
constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;

// Storage types, so that templates can name them.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

}  // namespace megadlm
