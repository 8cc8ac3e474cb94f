// Rotary position embedding, HuggingFace LLaMA rotate-half convention: dimension i pairs with i + D/2
// (not with i + 1 as in the original GPT-J / interleaved layout).
// Legend: N tokens (B*T), H heads, D head dim (even), P table positions.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace megadlm::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which threads cost more than they save
}

// cos, sin [P, D/2]: angle(p, i) = p * base^(-2i/D), computed in double and rounded once, so a large
// position (p ~ 1e5) keeps its phase to fp32 precision instead of drifting with fp32 products.
void rope_tables(float* cos, float* sin, int64_t P, int64_t D, double base) {
  const int64_t half = D / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(D));
#pragma omp parallel for schedule(static) if (P * half >= kParallelMin)
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      cos[p * half + i] = static_cast<float>(std::cos(angle));
      sin[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

namespace {

// Rotates each (i, i + D/2) pair of every head by +angle (Inverse = false) or -angle (true):
//   out[i] = x[i] cos -+ x[i+D/2] sin,  out[i+D/2] = x[i+D/2] cos +- x[i] sin.
// out [N, H, D], inp [N, H, D] (may alias), positions [N], cos [P, D/2], sin [P, D/2]
template <bool Inverse>
void rotate_half(float* out, const float* inp, const int32_t* positions, const float* cos, const float* sin,
                 int64_t N, int64_t H, int64_t D) {
  const int64_t half = D / 2;
#pragma omp parallel for schedule(static) if (N * H * D >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* cs = cos + static_cast<int64_t>(positions[n]) * half;
    const float* sn = sin + static_cast<int64_t>(positions[n]) * half;
    for (int64_t h = 0; h < H; ++h) {
      const float* x = inp + (n * H + h) * D;
      float* o = out + (n * H + h) * D;
      // Each lane reads its pair (i, i + D/2) before writing the same pair, so in place is safe.
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = x[i], x2 = x[i + half];
        const float s = Inverse ? -sn[i] : sn[i];
        o[i] = x1 * cs[i] - x2 * s;
        o[i + half] = x2 * cs[i] + x1 * s;
      }
    }
  }
}

}  // namespace

// out [N, H, D], inp [N, H, D] (may alias), positions [N], cos [P, D/2], sin [P, D/2]
void rope_forward(float* out, const float* inp, const int32_t* positions, const float* cos, const float* sin,
                  int64_t N, int64_t H, int64_t D) {
  rotate_half<false>(out, inp, positions, cos, sin, N, H, D);
}

// The rotation is orthogonal, so its backward is the rotation by -angle (the transpose).
// dinp [N, H, D] (written, may alias dout), dout [N, H, D], positions [N], cos [P, D/2], sin [P, D/2]
void rope_backward(float* dinp, const float* dout, const int32_t* positions, const float* cos, const float* sin,
                   int64_t N, int64_t H, int64_t D) {
  rotate_half<true>(dinp, dout, positions, cos, sin, N, H, D);
}

}  // namespace megadlm::cpu
