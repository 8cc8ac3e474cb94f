#pragma once
// Softmax over the last dimension of a row-major block, and its backward. Each row is one task with a
// fixed order of operations, so the bits do not depend on the thread count.
// Legend: N rows, V columns.
#include <cstdint>

namespace megadlm::cpu {

// out [N, V] = exp(x - max(x)) / sum(exp(x - max(x))) per row of inp [N, V]; out may alias inp. The sum
// is accumulated in double. A row of -inf gives a row of NaN, as the formula does.
void softmax_forward(float* out, const float* inp, int64_t N, int64_t V);

// din [N, V] = out * (dout - sum_j dout_j out_j) per row (written; may alias dout), out the forward's.
void softmax_backward(float* din, const float* out, const float* dout, int64_t N, int64_t V);

}  // namespace megadlm::cpu
