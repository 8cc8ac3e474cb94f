#pragma once
// Pointwise kernels. Legend: N rows (tokens, B*T), C columns (hidden), F ffn hidden.
// Convention for every backward in kernels/: input gradients are WRITTEN (overwritten), parameter
// gradients are ACCUMULATED (+=), so gradient accumulation over micro-batches needs no extra pass.
// out and inp may alias in every forward here.
#include <cstdint>

namespace megadlm::cpu {

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);  // dinp may alias dout

// SiLU: x * sigmoid(x).
void silu_forward(float* out, const float* inp, int64_t n);
void silu_backward(float* dinp, const float* inp, const float* dout, int64_t n);  // dinp may alias dout

// SwiGLU over Megatron's fused fc1 output: gate_up [N, 2F] holds gate in columns [0, F) and up in
// [F, 2F); out [N, F] = silu(gate) * up.
void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F);
// dgate_up [N, 2F] (written), gate_up [N, 2F], dout [N, F].
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N, int64_t F);

// out [N, C] += bias [C]
void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C);
// dbias [C] += sum over rows of dout [N, C]: groups of 16 rows summed in fp32, the groups' sums in
// double, in a fixed order, so the bits do not depend on the thread count.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C);
// The same sums, and out [N, C] = dout rounded to bf16 (f32_to_bf16) on the way: the bits of
// bias_backward and cast_f32_to_bf16 (cast.h) from one read of dout.
void cast_bf16_and_bias_backward(uint16_t* out, float* dbias, const float* dout, int64_t N, int64_t C);

// The bf16 MLP's activation in one pass (--bf16, nn/mlp.cpp): the input rounded to bf16 (written to
// h_bf16 / gate_up_bf16 when not null: the copy the MLP keeps), the activation of that rounded value,
// and the result rounded to bf16 into out (fc2's input): the bits that a cast, a cast back, the fp32
// activation above and a cast give (but for fp32 denormals, below 2^-126, which the roundings here
// flush to zero on a CPU with AVX512-BF16: see round_bf16_fast in vec16.h). An input that is already
// bf16-valued (the backward's remake from the kept copy) gives the same bits again.
// out [n] bf16, h_bf16 [n] bf16 (or null), h [n] fp32
void gelu_forward_bf16(uint16_t* out, uint16_t* h_bf16, const float* h, int64_t n);
// The same of h + bias (fc1's bias added in this pass, not in one of its own): the bits of
// bias_add_forward followed by the above. out, h_bf16 (or null), h [N, F]; bias [F]
void gelu_forward_bf16(uint16_t* out, uint16_t* h_bf16, const float* h, const float* bias, int64_t N, int64_t F);
// out [N, F] bf16, gate_up_bf16 [N, 2F] bf16 (or null), gate_up [N, 2F] fp32
void swiglu_forward_bf16(uint16_t* out, uint16_t* gate_up_bf16, const float* gate_up, int64_t N, int64_t F);
// The same from the kept bf16 copy (the backward's remake): out = bf16(activation(h)), h bf16.
void gelu_forward_bf16(uint16_t* out, const uint16_t* h, int64_t n);
void swiglu_forward_bf16(uint16_t* out, const uint16_t* gate_up, int64_t N, int64_t F);
// The backwards reading a bf16 input (the kept copy) where the fp32 ones read its widened values:
// the same bits, without the fp32 copy. dinp / dgate_up fp32 (written), dout fp32.
void gelu_backward(float* dinp, const uint16_t* inp, const float* dout, int64_t n);
void swiglu_backward(float* dgate_up, const uint16_t* gate_up, const float* dout, int64_t N, int64_t F);
// That gradient rounded to bf16 (f32_to_bf16) as it is made, for the bf16 products of fc1's backward:
// the bits of swiglu_backward and cast_f32_to_bf16 without the fp32 [N, 2F] in between.
void swiglu_backward_bf16(uint16_t* dgate_up, const uint16_t* gate_up, const float* dout, int64_t N, int64_t F);
// GELU's the same way, with fc1's bias gradient in the same pass: dinp [N, F] = bf16 of gelu_backward
// (inp [N, F] bf16, dout [N, F] fp32) and dbias [F] (or null) += its column sums: the bits of
// gelu_backward followed by cast_bf16_and_bias_backward, without the fp32 [N, F] in between.
void gelu_backward_bf16_and_bias(uint16_t* dinp, float* dbias, const uint16_t* inp, const float* dout, int64_t N,
                                 int64_t F);
// Both at once where the activation is remade in the backward (not kept): a [N, F] = the bits of
// gelu_forward_bf16(a, inp) (fc2's saved input), and dinp, dbias as gelu_backward_bf16_and_bias, from
// one exponential per element and one read of inp instead of two each.
void gelu_remake_and_backward_bf16(uint16_t* a, uint16_t* dinp, float* dbias, const uint16_t* inp,
                                   const float* dout, int64_t N, int64_t F);

// out = a + b (out may alias a or b); a += b.
void residual_add(float* out, const float* a, const float* b, int64_t n);
void add_inplace(float* a, const float* b, int64_t n);
void scale_inplace(float* a, float s, int64_t n);

}  // namespace megadlm::cpu
