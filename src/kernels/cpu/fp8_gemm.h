#pragma once
// fp8 matrix products by their definition, and the byte transpose their operands need.
//
// The CPU has no fp8 arithmetic: gemm_fp8 dequantises both operands to fp32 and multiplies them with
// cpu::gemm. It is the reference the GPU's fp8 products (cuBLASLt, kernels/cuda/gemm.cpp) are checked
// against and what the CUDA backend falls back to for a shape cuBLASLt's fp8 kernels do not take.
//
// Legend: M, N output rows / columns, K the reduced dimension; R, C a byte matrix's rows / columns.
#include <cstdint>

namespace megadlm::cpu {

// C [M, N] = (A [M, K] * a_scale) @ (B [N, K] * b_scale)^T + beta C (beta 0: C is not read).
// A, B: fp8 codes, E5M2 where the flag says so, else E4M3; the scales are dequantisation factors (the
// inverse of the scale each operand was quantised with). The only layout cuBLASLt's fp8 kernels take.
void gemm_fp8(int64_t M, int64_t N, int64_t K, const uint8_t* A, bool a_e5m2, float a_scale, const uint8_t* B,
              bool b_e5m2, float b_scale, float beta, float* C);

// out [C, R] = in [R, C]^T, bytes (fp8 codes), in 64 x 64 tiles, threaded over the tiles.
void transpose_u8(uint8_t* out, const uint8_t* in, int64_t R, int64_t C);

}  // namespace megadlm::cpu
