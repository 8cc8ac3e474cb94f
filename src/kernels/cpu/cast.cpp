// Conversions between fp32 and the narrow formats, element by element with the scalar conversions of
// core/dtype.h (round to nearest even; fp8 saturates to its largest finite value, NaN stays NaN).
//
// A scale is applied in fp32 before quantising and its inverse after dequantising, as fp8 recipes do:
// q = quantise(x * scale), x ~= dequantise(q) * inv_scale.
#include "kernels/cpu/cast.h"

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/vec16.h"

namespace megadlm::cpu {

namespace {

// Below this many elements, starting threads costs more than the conversion.
constexpr int64_t kParallelMin = 1 << 15;

void check_scale(const char* who, float scale) {
  MEGADLM_CHECK(std::isfinite(scale) && scale > 0.0f, who, ": scale ", scale, " must be finite and positive");
}

}  // namespace

// ---- bf16 -------------------------------------------------------------------------------------------------

void cast_f32_to_bf16(uint16_t* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(inp[i]);
}

void cast_f32_to_bf16_rows_ftz(uint16_t* out, int64_t ldo, const float* inp, int64_t ldi, int64_t rows,
                               int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* o = out + r * ldo;
    const float* x = inp + r * ldi;
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) vec::storeh16n(o + c, vec::round_bf16_fast(vec::load16(x + c)), 16);
    if (c < cols) vec::storeh16n(o + c, vec::round_bf16_fast(vec::load16n(x + c, cols - c)), cols - c);
  }
}

void cast_bf16_to_f32(float* out, const uint16_t* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(inp[i]);
}

void round_to_bf16(float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

// ---- fp16 -------------------------------------------------------------------------------------------------

void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n, float scale) {
  check_scale("cast_f32_to_f16", scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(inp[i] * scale);
}

void round_to_f16(float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n, float inv_scale) {
  check_scale("cast_f16_to_f32", inv_scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(inp[i]) * inv_scale;
}

// ---- fp8 --------------------------------------------------------------------------------------------------

void cast_f32_to_e4m3(uint8_t* out, const float* inp, int64_t n, float scale) {
  check_scale("cast_f32_to_e4m3", scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_e4m3(inp[i] * scale);
}

void cast_e4m3_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale) {
  check_scale("cast_e4m3_to_f32", inv_scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(inp[i]) * inv_scale;
}

void cast_f32_to_e5m2(uint8_t* out, const float* inp, int64_t n, float scale) {
  check_scale("cast_f32_to_e5m2", scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_e5m2(inp[i] * scale);
}

void cast_e5m2_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale) {
  check_scale("cast_e5m2_to_f32", inv_scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = e5m2_to_f32(inp[i]) * inv_scale;
}

// The round trips divide by the scale rather than multiply by its inverse, so that the result is the
// value the quantised code stands for even when 1/scale is not exact in fp32.
void quantize_dequantize_e4m3(float* x, int64_t n, float scale) {
  check_scale("quantize_dequantize_e4m3", scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = e4m3_to_f32(f32_to_e4m3(x[i] * scale)) / scale;
}

void quantize_dequantize_e5m2(float* x, int64_t n, float scale) {
  check_scale("quantize_dequantize_e5m2", scale);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = e5m2_to_f32(f32_to_e5m2(x[i] * scale)) / scale;
}

}  // namespace megadlm::cpu
