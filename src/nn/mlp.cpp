#include "nn/mlp.h"

#include "kernels/cpu/elementwise.h"

namespace megadlm {

MLP::MLP(ParamStore& store, const ParallelContext& ctx, const std::string& name, const TransformerConfig& cfg,
         int64_t ffn_hidden, float output_init_std)
    : act_(cfg.activation), F_(ffn_hidden) {
  const int64_t fc1_out = act_ == Activation::SwiGLU ? 2 * F_ : F_;
  fc1_ = Linear(store, ctx, name + ".fc1", cfg.hidden_size, fc1_out, cfg.add_bias_linear, cfg.init_method_std);
  fc2_ = Linear(store, ctx, name + ".fc2", F_, cfg.hidden_size, cfg.add_bias_linear, output_init_std,
                LinearParallel::Row);
}

Tensor MLP::forward(Arena& arena, const Tensor& x) {
  h_ = fc1_.forward(arena, x);
  const int64_t N = h_.size(0);
  Tensor a = arena.tensor({N, F_});
  if (act_ == Activation::Gelu) cpu::gelu_forward(a.data<float>(), h_.data<float>(), N * F_);
  else cpu::swiglu_forward(a.data<float>(), h_.data<float>(), N, F_);
  return fc2_.forward(arena, a);
}

void MLP::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  const int64_t N = h_.size(0);
  const size_t mark = arena.mark();
  Tensor da = arena.tensor({N, F_});
  fc2_.backward(dy, da, false);
  Tensor dh = arena.tensor(h_.shape());
  if (act_ == Activation::Gelu) cpu::gelu_backward(dh.data<float>(), h_.data<float>(), da.data<float>(), N * F_);
  else cpu::swiglu_backward(dh.data<float>(), h_.data<float>(), da.data<float>(), N, F_);
  fc1_.backward(dh, dx, false);
  arena.release(mark);
}

}  // namespace megadlm
