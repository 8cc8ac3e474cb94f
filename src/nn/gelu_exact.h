#pragma once
// GELU as x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))): BERT's "gelu" (PyTorch's default), where the MLP's
// Activation::Gelu is the tanh approximation. Elementwise loops on host memory: the BERT family runs
// on the CPU in fp32 (docs/bert.md), so there is no kernel of the Backend for it; a tensor on another
// device is an Error. Its loops live with the other host activations (nn/host_activation.cpp).
#include <cstdint>

#include "core/tensor.h"

namespace megadlm {

// out [n] = gelu(inp [n]); may alias.
void gelu_exact_forward(const Tensor& out, const Tensor& inp);
// dinp [n] = dout * gelu'(inp); dinp may alias dout.
void gelu_exact_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout);

}  // namespace megadlm
