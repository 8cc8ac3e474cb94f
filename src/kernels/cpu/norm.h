#pragma once
// LayerNorm and RMSNorm over the last dimension. Legend: N rows, C normalised features.
// Statistics are computed in fp32 with a two-pass (mean, then variance) formula.
// Per-head QK-norm is rmsnorm with N = B*T*H rows of C = D features and one weight [D].
#include <cstdint>

namespace megadlm::cpu {

// out [N,C] = (inp - mean) * rstd * weight + bias; saves mean [N] and rstd [N]. bias may be null.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps);
// dinp [N,C] written; dweight [C], dbias [C] accumulated (dbias may be null).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C);

// out [N,C] = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd [N].
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps);
// dinp [N,C] written; dweight [C] accumulated.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C);

}  // namespace megadlm::cpu
