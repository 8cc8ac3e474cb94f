#pragma once
// The MLP activations that run as host loops in fp32 (no Backend kernel): the families that use them
// (BERT, CLIP's vision tower) run on the CPU in fp32. A tensor on another device or of another dtype is
// an Error.
//   GeluErf    x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))   HF "gelu" (nn/gelu_exact.h)
//   QuickGelu  x * sigmoid(1.702 x)                         HF "quick_gelu" (OpenAI's CLIP)
// None: the activation is the MLP's Backend one (Activation::Gelu's tanh form, SwiGLU).
#include <cstdint>

#include "core/tensor.h"

namespace megadlm {

enum class HostActivation : uint8_t { None, GeluErf, QuickGelu };

// out [n] = act(inp [n]); may alias. act must not be None.
void host_activation_forward(HostActivation act, const Tensor& out, const Tensor& inp);
// dinp [n] = dout * act'(inp); dinp may alias dout. act must not be None.
void host_activation_backward(HostActivation act, const Tensor& dinp, const Tensor& inp, const Tensor& dout);

// The quick GELU alone: out [n] = x sigmoid(1.702 x), dinp [n] = dout (s + 1.702 x s (1 - s)).
void quick_gelu_forward(const Tensor& out, const Tensor& inp);
void quick_gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout);

}  // namespace megadlm
