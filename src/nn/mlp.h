#pragma once
// The feed-forward block: fc1 (column-parallel) -> GELU or SwiGLU -> fc2 (row-parallel).
// With SwiGLU, fc1 is Megatron's fused [gate; up] projection of 2F outputs. Tensor parallelism gives
// each rank F/tp hidden features: the same slice of gate and of up (fc1's weight is then registered
// as [2, F, C] split along dimension 1), and fc2's matching input columns.
// Under a precision policy the block keeps only the narrow fc1 output (and, for bf16 storage and fp8,
// fc2's own input copy); the fp32 values are made in the policy's transient arena.
// Legend: N tokens, C hidden, F ffn hidden.
#include <string>

#include "core/arena.h"
#include "nn/host_activation.h"
#include "nn/linear.h"
#include "nn/sublayer.h"

namespace megadlm {

class MLP : public Sublayer {
 public:
  MLP() = default;
  // Sizes and biases from cfg; the activation and the hidden size F as given. host: an activation of host
  // loops in place of `activation` (nn/host_activation.h: the erf GELU, the quick GELU), on the CPU only;
  // under a precision policy it runs in fp32 on the widened narrow copies (the backend's fused bf16
  // activation passes are for `activation`'s own kernels).
  MLP(ParamStore& store, const ParallelContext& ctx, const std::string& name, const TransformerConfig& cfg,
      Activation activation, int64_t ffn_hidden, float output_init_std, HostActivation host = HostActivation::None);

  Tensor forward(Arena& arena, const Tensor& x);  // x [N, C] -> [N, C]
  Tensor forward(Arena& arena, const Tensor& x, const BatchInfo&) override { return forward(arena, x); }
  void backward(Arena& arena, const Tensor& dy, Tensor& dx) override;  // dx [N, C] written
  void set_precision(MixedPrecision* p) override {                     // nn/precision.h
    prec_ = p;
    fc1_.set_precision(p);
    fc2_.set_precision(p);
  }

 private:
  Tensor forward_low_precision(Arena& arena, const Tensor& x);
  void activation_forward(Tensor& a, const Tensor& h) const;  // h [N, fc1 out] -> a [N, F]
  // h [N, fc1 out] fp32 -> a [N, F] bf16 and, when h_bf16 is not null, h_bf16 = h in bf16, one pass
  // (Backend::activation_forward_bf16: the bits of the cast / activation / cast sequence). With bias [F]
  // (GELU only), of h + bias: fc1's bias added on the same pass. Where the backend has no fused passes
  // (fused_bf16_activations()), the MLP takes that sequence instead.
  void activation_forward_bf16(Tensor& a, Tensor* h_bf16, const Tensor& h, const float* bias = nullptr) const;
  // a [N, F] bf16 = the activation of the kept bf16 h_ (the backward's remake).
  void remake_activation_bf16(Tensor& a) const;
  // bf16 and fp16: fc2's narrow input is not kept but remade from h_ in the backward (an elementwise
  // pass instead of N*F saved values). With bf16 products and fp16 the forward multiplies the activation
  // of the narrow h_ too, so the remade copy is bit for bit the one multiplied; bf16 storage only keeps
  // its exact fp32 forward (the activation of the fp32 h), so its backward's copy is the activation of
  // the bf16 h, rounded: within bf16's rounding of the one the forward would have kept. Not fp8 (fc2's
  // input copy carries its own scale).
  bool recompute_activation() const { return prec_ && remakes_mlp_activation(prec_->config()); }
  bool exact_forward() const { return prec_ && prec_->mode() == PrecisionMode::BF16 && !prec_->bf16_gemm(); }
  // Whether the backend's fused bf16 activation passes apply: its own activation, not a host one.
  bool fused_bf16(const Backend& be) const;
  Activation act_ = Activation::Gelu;
  int64_t F_ = 0;  // this rank's hidden features: ffn_hidden / tp
  HostActivation host_ = HostActivation::None;
  const ParallelContext* ctx_ = nullptr;
  Linear fc1_, fc2_;
  Tensor h_;  // fc1 output [N, F] or [N, 2F]: fp32, or bf16 / fp16 bits under a precision policy
  MixedPrecision* prec_ = nullptr;
  bool low_precision() const { return prec_ && prec_->mode() != PrecisionMode::FP32; }
};

}  // namespace megadlm
