#pragma once
// Conversions between fp32 and the narrow formats, with an optional scale applied before quantising
// (fp8 recipes: q = quantise(x * scale), x ~= dequantise(q) / scale). Threaded, element-wise.
#include <cstdint>

namespace megadlm::cpu {

void cast_f32_to_bf16(uint16_t* out, const float* inp, int64_t n);
// The same over a block of rows, out [rows, cols] (row stride ldo) from inp [rows, cols] (row stride
// ldi), threads over rows, except that fp32 denormals (below 2^-126 in magnitude) become zero where the
// CPU has AVX512-BF16: its one conversion instruction, as oneDNN's bf16 outputs and the bf16 products'
// inputs treat them. For the output layer's bf16 logits, made through fp32 slabs (kernels/cpu/gemm.h).
void cast_f32_to_bf16_rows_ftz(uint16_t* out, int64_t ldo, const float* inp, int64_t ldi, int64_t rows,
                               int64_t cols);
void cast_bf16_to_f32(float* out, const uint16_t* inp, int64_t n);
void cast_f32_to_f16(uint16_t* out, const float* inp, int64_t n, float scale = 1.0f);
void cast_f16_to_f32(float* out, const uint16_t* inp, int64_t n, float inv_scale = 1.0f);
void cast_f32_to_e4m3(uint8_t* out, const float* inp, int64_t n, float scale);
void cast_e4m3_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale);
void cast_f32_to_e5m2(uint8_t* out, const float* inp, int64_t n, float scale);
void cast_e5m2_to_f32(float* out, const uint8_t* inp, int64_t n, float inv_scale);
// Round-trip through a format in place (fp8 emulation around matrix products): x = dq(q(x*scale))/scale.
void quantize_dequantize_e4m3(float* x, int64_t n, float scale);
void quantize_dequantize_e5m2(float* x, int64_t n, float scale);
void round_to_bf16(float* x, int64_t n);
void round_to_f16(float* x, int64_t n);  // beyond 65504 in magnitude: inf, as fp16 holds it

}  // namespace megadlm::cpu
