#pragma once
// Fused softmax cross-entropy over the vocabulary, loss and gradient in one pass over the logits.
// Legend: N tokens, V vocabulary (padded).
#include <cstdint>

namespace megadlm::cpu {

// For each row n with targets[n] != ignore_index:
//   losses[n]   = w_n * (logsumexp(logits[n]) - logits[n][targets[n]])
//   dlogits[n]  = grad_scale * w_n * (softmax(logits[n]) - onehot(targets[n]))
// with w_n = weights[n] (or 1 when weights is null). Ignored rows get loss 0 and zero gradient.
// dlogits may alias logits (in place, saving V*N floats); dlogits may be null (forward only).
// Returns the sum of losses, accumulated in double in a fixed order (thread-count independent).
double cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                      const float* weights, int64_t ignore_index, float grad_scale, int64_t N,
                                      int64_t V);

}  // namespace megadlm::cpu
