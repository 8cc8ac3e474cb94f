#pragma once
// Optimizer kernels over flat fp32 buffers: one pass over memory each.
#include <cstdint>

#include "kernels/types.h"

namespace megadlm::cpu {

// param, m, v [n] updated in place from grad [n]. m and v start at zero. param_bf16 [n] (or null)
// receives the updated param in bf16 on the same pass (the copy bf16 products read next step). With
// h.zero_grad, grad is zeroed on the same pass too (instead of a memset of the whole buffer later).
void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                uint16_t* param_bf16 = nullptr);

// sum of squares of x [n], accumulated in double over fixed-size chunks combined in a fixed order, so the
// result is bitwise identical for any thread count.
double sum_squares(const float* x, int64_t n);
// max |x|; NaN if any element is NaN.
float abs_max(const float* x, int64_t n);
// true when every element is finite.
bool all_finite(const float* x, int64_t n);

}  // namespace megadlm::cpu
