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
  for (Layer& y : layers_)
    for (T5Attention* a : {&y.self_attn, &y.cross_attn}) a->set_precision(p);
  for (Layer& y : layers_) y.mlp.set_precision(p);
}

void T5Stack::set_recompute(const RecomputeConfig& cfg) {
  recompute_start_ = recompute_group_starts(cfg, static_cast<int64_t>(layers_.size()));
  bool any = false;
  for (int64_t s : recompute_start_) any = any || s >= 0;
  if (!any) recompute_start_.clear();
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
  const auto L = static_cast<int64_t>(layers_.size());
  Tensor h = x;
  if (recompute_start_.empty()) {
    if (L > 0) h = forward_layers(arena, 0, L - 1, h);
    return final_norm_.forward(arena, h);
  }
  group_inputs_.assign(layers_.size(), Tensor());
  for (int64_t l = 0; l < L;) {
    if (recompute_start_[static_cast<size_t>(l)] < 0) {
      h = forward_layers(arena, l, l, h);
      ++l;
      continue;
    }
    // A recomputed group: its output is copied below the mark and everything else it made is freed.
    // The layers read their input without changing it, so h is still the group's input in the backward.
    const int64_t last = recompute_group_end(recompute_start_, l);
    group_inputs_[static_cast<size_t>(l)] = h;
    Tensor out = arena.tensor(h.shape());
    const size_t mark = arena.mark();
    out.copy_from(forward_layers(arena, l, last, h));
    arena.release(mark);
    h = out;
    l = last + 1;
  }
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
  for (auto l = static_cast<int64_t>(layers_.size()) - 1; l >= 0;) {
    const int64_t start = recompute_start_.empty() ? -1 : recompute_start_[static_cast<size_t>(l)];
    if (start < 0) {
      backward_layer(arena, static_cast<size_t>(l), g, f, n, dbias.data<float>());
      --l;
      continue;
    }
    // The group's forward again from its kept input (the same kernels on the same values give the same
    // activations), then its backward; both freed after.
    const size_t group_mark = arena.mark();
    forward_layers(arena, start, l, group_inputs_[static_cast<size_t>(start)]);
    for (int64_t j = l; j >= start; --j) backward_layer(arena, static_cast<size_t>(j), g, f, n, dbias.data<float>());
    arena.release(group_mark);
    l = start - 1;
  }
  bias_.backward(dbias);
  dx.copy_from(g);
  arena.release(mark);
}

}  // namespace megadlm
