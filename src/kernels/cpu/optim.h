#pragma once
// Optimizer kernels over flat fp32 buffers: one pass over memory each.
#include <cstdint>

namespace megadlm::cpu {

struct AdamWParams {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based step number, for bias correction
  float grad_scale = 1.0f;    // the gradient used is grad * grad_scale (clipping, folded into the pass)
  bool zero_grad = false;     // grad is set to zero once read (the next step's accumulation starts there)
};

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
