#include "nn/mlp.h"

#include "kernels/backend.h"
#include "nn/precision.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

MLP::MLP(ParamStore& store, const ParallelContext& ctx, const std::string& name, const TransformerConfig& cfg,
         Activation activation, int64_t ffn_hidden, float output_init_std, HostActivation host)
    : act_(activation), F_(ffn_hidden), host_(host), ctx_(&ctx) {
  MEGADLM_CHECK(host == HostActivation::None || activation == Activation::Gelu, name,
                ": a host activation (erf or quick GELU) takes one fc1 block, not SwiGLU's two");
  // Tensor parallelism splits the F hidden features: F/tp per rank (SwiGLU: F/tp gate and F/tp up).
  MEGADLM_CHECK(ffn_hidden % ctx.tp.size == 0, name, ": --ffn-hidden-size ", ffn_hidden,
                " is not divisible by --tensor-model-parallel-size ", ctx.tp.size);
  const int64_t blocks = act_ == Activation::SwiGLU ? 2 : 1;
  fc1_ = Linear(store, ctx, name + ".fc1", cfg.hidden_size, blocks * ffn_hidden, cfg.add_bias_linear,
                cfg.init_method_std, LinearParallel::Column, blocks);
  fc2_ = Linear(store, ctx, name + ".fc2", ffn_hidden, cfg.hidden_size, cfg.add_bias_linear, output_init_std,
                LinearParallel::Row);
  F_ = ffn_hidden / ctx.tp.size;
}

bool MLP::fused_bf16(const Backend& be) const { return host_ == HostActivation::None && be.fused_bf16_activations(); }

void MLP::activation_forward(Tensor& a, const Tensor& h) const {
  const Backend& be = backend_of(h);
  const int64_t N = h.size(0);
  if (host_ != HostActivation::None) host_activation_forward(host_, a, h);
  else if (act_ == Activation::Gelu) be.gelu_forward(a.data<float>(), h.data<float>(), N * F_);
  else be.swiglu_forward(a.data<float>(), h.data<float>(), N, F_);
}

void MLP::activation_forward_bf16(Tensor& a, Tensor* h_bf16, const Tensor& h, const float* bias) const {
  MEGADLM_CHECK(bias == nullptr || act_ == Activation::Gelu, "MLP: SwiGLU's activation pass adds no bias");
  const int64_t N = h.size(0);
  auto* hb = h_bf16 ? static_cast<uint16_t*>(h_bf16->raw()) : nullptr;
  backend_of(h).activation_forward_bf16(act_, static_cast<uint16_t*>(a.raw()), hb, h.data<float>(), bias, N, F_);
}

void MLP::remake_activation_bf16(Tensor& a) const {
  backend_of(h_).activation_remake_bf16(act_, static_cast<uint16_t*>(a.raw()), static_cast<const uint16_t*>(h_.raw()),
                                        h_.size(0), F_);
}

// Under a precision policy the fc1 output and the activation are made in the policy's transient arena
// (freed before returning) and only narrow copies are kept for the backward: h_ here (the
// activation's input) and, unless the activation is recomputed, fc2's saved input.
Tensor MLP::forward_low_precision(Arena& arena, const Tensor& x) {
  // fc1's output has all rows (sequence parallelism: x holds this rank's 1/tp of them).
  const int64_t N = x.numel() / x.size(-1) * (sequence_parallel(*ctx_) ? ctx_->tp.size : 1);
  const int64_t fc1_out = fc1_.out_features();
  Arena& tmp = prec_->transient();
  const size_t mark = tmp.mark();
  Tensor h = tmp.tensor({N, fc1_out});
  const DType narrow = activation_dtype(*prec_);
  // The one-pass bf16 GELU adds fc1's bias itself (one pass over the fp32 [N, F] fewer).
  const bool one_pass_bf16 = recompute_activation() && !exact_forward() && narrow == DType::BF16 &&
                             fused_bf16(backend_of(h));
  const float* bias_in_activation = one_pass_bf16 && act_ == Activation::Gelu ? fc1_.bias_values() : nullptr;
  if (bias_in_activation) fc1_.forward_into_without_bias(arena, x, h);
  else fc1_.forward_into(arena, x, h);
  h_ = arena.tensor({N, fc1_out}, narrow);
  Tensor y;
  if (exact_forward()) {
    // bf16 storage only: fc2 multiplies the fp32 activation of the fp32 h and keeps no copy of it (the
    // backward remakes one from h_).
    store_activation(*prec_, h_, h);
    Tensor a = tmp.tensor({N, F_});
    activation_forward(a, h);
    Tensor out = (sequence_parallel(*ctx_) ? tmp : arena).tensor({N, fc2_.out_features()});
    y = fc2_.forward_unsaved(arena, a, out);
  } else if (recompute_activation()) {
    // The activation is not kept: the backward remakes fc2's input from h_. So that the remade copy
    // is bit for bit the one multiplied here, the forward takes the activation of the narrow h too.
    Tensor a_narrow = tmp.tensor({N, F_}, narrow);
    Tensor a = a_narrow;  // bf16 products read only the narrow copy
    if (one_pass_bf16) {
      activation_forward_bf16(a_narrow, &h_, h, bias_in_activation);  // h_, the activation and its copy
    } else {
      store_activation(*prec_, h_, h);
      load_activation(h, h_);
      a = tmp.tensor({N, F_});
      activation_forward(a, h);
      store_activation(*prec_, a_narrow, a);
    }
    // fc2's output is the layer's (arena), unless sequence parallelism reduce-scatters it into a new one.
    Tensor out = (sequence_parallel(*ctx_) ? tmp : arena).tensor({N, fc2_.out_features()});
    y = fc2_.forward_with_saved_input(arena, a, a_narrow, out);
    fc2_.share_saved_input(Tensor());  // a_narrow is freed below
  } else {
    store_activation(*prec_, h_, h);
    Tensor a = tmp.tensor({N, F_});
    activation_forward(a, h);
    y = fc2_.forward(arena, a);
  }
  tmp.release(mark);
  return y;
}

Tensor MLP::forward(Arena& arena, const Tensor& x) {
  if (low_precision()) return forward_low_precision(arena, x);
  h_ = fc1_.forward(arena, x);
  const int64_t N = h_.size(0);
  Tensor a = arena.tensor({N, F_});
  activation_forward(a, h_);
  return fc2_.forward(arena, a);
}

void MLP::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  const int64_t N = h_.size(0);
  const size_t mark = arena.mark();
  // With the backend's fused bf16 passes the kernels read the kept bf16 h_ as it is (the bits the fp32
  // kernels give on its widened values); otherwise a narrow h_ comes back in fp32, in dh itself: the
  // activation backward reads each input before it writes the gradient at the same place. The
  // activation's gradient goes to fc1 already in bf16 (the bits of its fp32 form cast), without the fp32
  // [N, F] between: GELU's with fc1's bias gradient summed in the same pass; SwiGLU's when fc1 has no bias.
  const Backend& be = backend_of(h_);
  const bool bf16_kernels = h_.dtype() == DType::BF16 && fused_bf16(be);
  const bool bf16_dh = bf16_kernels && fc1_.takes_bf16_dy() &&
                       (act_ == Activation::Gelu || fc1_.bias_grad() == nullptr);
  Tensor da = arena.tensor({N, F_});
  Tensor dh = arena.tensor(h_.shape(), bf16_dh ? DType::BF16 : DType::F32);
  Tensor h = h_;
  if (h_.dtype() != DType::F32 && !bf16_kernels) {
    load_activation(dh, h_);
    h = dh;
  }
  const auto* hb = static_cast<const uint16_t*>(h_.raw());  // the kept bf16 copy, with bf16_kernels
  if (recompute_activation() && bf16_dh && act_ == Activation::Gelu) {
    // One pass between fc2's two products (it needs fc2's dx): fc2's saved input remade, and the
    // activation's gradient in bf16 with fc1's bias gradient, from one read of h_ and one exponential
    // per element (the bits of the remake and the backward apart).
    Tensor a_narrow = arena.tensor({N, F_}, DType::BF16);
    auto* dhb = static_cast<uint16_t*>(dh.raw());
    fc2_.backward(dy, da, false, [&] {
      be.gelu_remake_and_backward_bf16(static_cast<uint16_t*>(a_narrow.raw()), dhb, fc1_.bias_grad(), hb,
                                       da.data<float>(), N, F_);
      fc2_.share_saved_input(a_narrow);
    });
    fc2_.share_saved_input(Tensor());
    fc1_.backward_bf16_dy(dhb, N, dx, false);
    arena.release(mark);
    return;
  }
  if (recompute_activation()) {
    // fc2's saved input remade as the forward made it (under fp16 through da, which fc2's backward
    // then overwrites).
    Tensor a_narrow = arena.tensor({N, F_}, activation_dtype(*prec_));
    if (bf16_kernels) {
      remake_activation_bf16(a_narrow);
    } else {
      activation_forward(da, h);
      store_activation(*prec_, a_narrow, da);
    }
    fc2_.share_saved_input(a_narrow);
    fc2_.backward(dy, da, false);
    fc2_.share_saved_input(Tensor());
  } else {
    fc2_.backward(dy, da, false);
  }
  if (bf16_dh) {
    auto* dhb = static_cast<uint16_t*>(dh.raw());
    be.activation_backward_bf16(act_, dhb, act_ == Activation::Gelu ? fc1_.bias_grad() : nullptr, hb,
                                da.data<float>(), N, F_);
    fc1_.backward_bf16_dy(dhb, N, dx, false);
    arena.release(mark);
    return;
  }
  if (bf16_kernels) {
    be.activation_backward_from_bf16(act_, dh.data<float>(), hb, da.data<float>(), N, F_);
  } else {
    if (host_ != HostActivation::None) host_activation_backward(host_, dh, h, da);
    else if (act_ == Activation::Gelu) be.gelu_backward(dh.data<float>(), h.data<float>(), da.data<float>(), N * F_);
    else be.swiglu_backward(dh.data<float>(), h.data<float>(), da.data<float>(), N, F_);
  }
  fc1_.backward(dh, dx, false);
  arena.release(mark);
}

}  // namespace megadlm
