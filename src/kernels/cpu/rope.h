#pragma once
// Rotary position embedding in HuggingFace LLaMA's rotate-half convention: for i < D/2,
//   theta_i(p) = p * base^(-2i/D)
//   out[i]       = x[i] * cos - x[i + D/2] * sin
//   out[i + D/2] = x[i + D/2] * cos + x[i] * sin
// Legend: N tokens (B*T), H heads, D head dim (even), P table positions.
#include <cstdint>

namespace megadlm::cpu {

// cos, sin [P, D/2] for positions 0..P-1. Angles are computed in double, then rounded.
void rope_tables(float* cos, float* sin, int64_t P, int64_t D, double base);

// x [N, H, D] rotated in place (or out-of-place when out != inp); positions [N] in [0, P).
void rope_forward(float* out, const float* inp, const int32_t* positions, const float* cos, const float* sin,
                  int64_t N, int64_t H, int64_t D);
// The inverse rotation; dinp may alias dout.
void rope_backward(float* dinp, const float* dout, const int32_t* positions, const float* cos, const float* sin,
                   int64_t N, int64_t H, int64_t D);

}  // namespace megadlm::cpu
