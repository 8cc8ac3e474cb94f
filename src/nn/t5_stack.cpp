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

void T5Stack::set_precision(MixedPrecision* p) {
  for (Layer& y : layers_) {
    y.self_attn.set_precision(p);
    y.cross_attn.set_precision(p);
    y.mlp.set_precision(p);
  }
}

void T5Stack::set_recompute(const RecomputeConfig& cfg) {
  recompute_start_ = recomputed_group_starts(cfg, static_cast<int64_t>(layers_.size()));
}

T5AttentionGeometry T5Stack::self_geometry() const {
  return T5AttentionGeometry{in_.B, in_.T, in_.T, bias_values_.data<float>(), in_.mask, decoder_};
}

T5AttentionGeometry T5Stack::cross_geometry() const {
  return T5AttentionGeometry{in_.B, in_.T, in_.S, nullptr, in_.memory_mask, false};
}

Tensor T5Stack::forward_layers(Arena& arena, int64_t first, int64_t last, Tensor h) {
  const Backend& be = backend_of(h);
  const T5AttentionGeometry self = self_geometry(), cross = cross_geometry();
  auto residual = [&](Tensor y, const Tensor& x) {  // y := x + y
    be.add_inplace(y.data<float>(), x.data<float>(), y.numel());
    return y;
  };
  for (int64_t l = first; l <= last; ++l) {
    Layer& y = layers_[static_cast<size_t>(l)];
    const Tensor a = y.self_norm.forward(arena, h);
    h = residual(y.self_attn.forward(arena, a, a, self), h);
    if (decoder_) h = residual(y.cross_attn.forward(arena, y.cross_norm.forward(arena, h), in_.memory, cross), h);
    h = residual(y.mlp.forward(arena, y.ff_norm.forward(arena, h)), h);
  }
  return h;
}

Tensor T5Stack::forward(Arena& arena, const Tensor& x, const T5StackInputs& in) {
  MEGADLM_CHECK(!decoder_ || (in.memory.defined() && in.S > 0), "the T5 decoder needs the encoder's output");
  in_ = in;
  bias_values_ = bias_.forward(arena, in.T, in.T);
  const Tensor h = forward_with_recompute(arena, recompute_start_, static_cast<int64_t>(layers_.size()), x,
                                          group_inputs_, [&](int64_t first, int64_t last, Tensor in_rows) {
                                            return forward_layers(arena, first, last, in_rows);
                                          });
  return final_norm_.forward(arena, h);
}

void T5Stack::backward_layer(Arena& arena, size_t l, Tensor& g, Tensor& f, Tensor& n, float* dbias) {
  const Backend& be = backend_of(g);
  auto add_branch = [&](Norm& norm) {  // g += norm's backward of f (the branch module's input gradient)
    norm.backward(f, n);
    be.add_inplace(g.data<float>(), n.data<float>(), g.numel());
  };
  Layer& y = layers_[l];
  y.mlp.backward(arena, g, f);
  add_branch(y.ff_norm);
  if (decoder_) {
    y.cross_attn.backward(arena, g, f, *in_.memory_grad, nullptr);
    add_branch(y.cross_norm);
  }
  y.self_attn.backward(arena, g, f, f, dbias);
  add_branch(y.self_norm);
}

void T5Stack::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  const size_t mark = arena.mark();
  // g: the gradient of the residual stream, carried down the layers; each branch adds its share.
  Tensor g = arena.tensor(dy.shape()), f = arena.tensor(dy.shape()), n = arena.tensor(dy.shape());
  final_norm_.backward(dy, g);
  Tensor dbias = arena.zeros(bias_values_.shape());
  backward_with_recompute(
      arena, recompute_start_, static_cast<int64_t>(layers_.size()), group_inputs_,
      [&](int64_t first, int64_t last, Tensor in_rows) { return forward_layers(arena, first, last, in_rows); },
      [&](int64_t l) { backward_layer(arena, static_cast<size_t>(l), g, f, n, dbias.data<float>()); });
  bias_.backward(dbias);
  dx.copy_from(g);
  arena.release(mark);
}

}  // namespace megadlm
