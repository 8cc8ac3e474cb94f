#include "nn/t5_stack.h"

#include "kernels/backend.h"

namespace megadlm {

T5Stack::T5Stack(ParamStore& store, const ParallelContext& ctx, const std::string& prefix,
                 const TransformerConfig& cfg, const T5StackOptions& opt)
    : decoder_(opt.decoder), H_(cfg.num_attention_heads) {
  const int64_t C = cfg.hidden_size;
  auto rmsnorm = [&](const std::string& name) { return Norm(store, name, NormKind::RMSNorm, C, cfg.norm_epsilon, false); };
  layers_.resize(static_cast<size_t>(opt.num_layers));
  for (int64_t l = 0; l < opt.num_layers; ++l) {
    Layer& y = layers_[static_cast<size_t>(l)];
    const std::string n = prefix + ".layers." + std::to_string(l);
    y.self_norm = rmsnorm(n + ".input_layernorm");
    y.self_attn = T5Attention(store, ctx, n + ".self_attn", cfg);
    if (l == 0)
      bias_ = T5RelativeBias(store, ctx, n + ".self_attn.relative_attention_bias", opt.num_buckets, H_,
                             opt.max_distance, !opt.decoder, cfg.init_method_std);
    if (opt.decoder) {
      y.cross_norm = rmsnorm(n + ".pre_cross_attn_layernorm");
      y.cross_attn = T5Attention(store, ctx, n + ".cross_attn", cfg);
    }
    y.ff_norm = rmsnorm(n + ".post_attention_layernorm");
    y.mlp = T5FeedForwardBlock(store, ctx, n + ".mlp", cfg, opt.feed_forward);
  }
  final_norm_ = rmsnorm(prefix + ".norm");
}

Tensor T5Stack::forward(Arena& arena, const Tensor& x, const T5StackInputs& in) {
  MEGADLM_CHECK(!decoder_ || (in.memory.defined() && in.S > 0), "the T5 decoder needs the encoder's output");
  in_ = in;
  const Backend& be = backend_of(x);
  bias_values_ = bias_.forward(arena, in.T, in.T);
  const T5AttentionGeometry self{in.B, in.T, in.T, bias_values_.data<float>(), in.mask, decoder_};
  const T5AttentionGeometry cross{in.B, in.T, in.S, nullptr, in.memory_mask, false};
  auto residual = [&](Tensor y, const Tensor& h) {  // y := h + y
    be.add_inplace(y.data<float>(), h.data<float>(), y.numel());
    return y;
  };
  Tensor h = x;
  for (Layer& y : layers_) {
    const Tensor a = y.self_norm.forward(arena, h);
    h = residual(y.self_attn.forward(arena, a, a, self), h);
    if (decoder_) h = residual(y.cross_attn.forward(arena, y.cross_norm.forward(arena, h), in.memory, cross), h);
    h = residual(y.mlp.forward(arena, y.ff_norm.forward(arena, h)), h);
  }
  return final_norm_.forward(arena, h);
}

void T5Stack::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  const Backend& be = backend_of(dy);
  const size_t mark = arena.mark();
  // g: the gradient of the residual stream, carried down the layers; each branch adds its share.
  Tensor g = arena.tensor(dy.shape()), f = arena.tensor(dy.shape()), n = arena.tensor(dy.shape());
  final_norm_.backward(dy, g);
  Tensor dbias = arena.zeros(bias_values_.shape());
  auto add_branch = [&](Norm& norm) {  // g += norm's backward of f (the branch module's input gradient)
    norm.backward(f, n);
    be.add_inplace(g.data<float>(), n.data<float>(), g.numel());
  };
  for (size_t l = layers_.size(); l-- > 0;) {
    Layer& y = layers_[l];
    y.mlp.backward(arena, g, f);
    add_branch(y.ff_norm);
    if (decoder_) {
      y.cross_attn.backward(arena, g, f, *in_.memory_grad, nullptr);
      add_branch(y.cross_norm);
    }
    y.self_attn.backward(arena, g, f, f, dbias.data<float>());
    add_branch(y.self_norm);
  }
  bias_.backward(dbias);
  dx.copy_from(g);
  arena.release(mark);
}

}  // namespace megadlm
