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

void T5Stack::start_decoding(Arena& arena, const Tensor& memory, const int32_t* memory_mask, int64_t B, int64_t S,
                             int64_t R, T5DecoderCache& cache) {
  MEGADLM_CHECK(decoder_, "T5Stack::start_decoding: the encoder does not decode");
  MEGADLM_CHECK(B >= 1 && S >= 1 && R >= 1 && memory.size(0) == B * S, "T5Stack::start_decoding: ", memory.size(0),
                " memory rows for ", B, " sequences of ", S, " (room for ", R, " decoder rows)");
  cache = T5DecoderCache{};
  cache.B = B;
  cache.S = S;
  cache.R = R;
  cache.memory = Tensor::empty(memory.shape(), DType::F32);
  cache.memory.copy_from(memory);
  if (memory_mask) cache.memory_mask.assign(memory_mask, memory_mask + B * S);
  const int64_t HD = layers_.empty() ? 0 : layers_[0].self_attn.inner_size();
  for (Layer& y : layers_) {
    auto rows = [&](int64_t n) { return Tensor::empty({n, HD}, DType::F32); };
    cache.cross_k.push_back(rows(B * S));
    cache.cross_v.push_back(rows(B * S));
    cache.self_k.push_back(rows(B * R));
    cache.self_v.push_back(rows(B * R));
    y.cross_attn.keys_values(arena, cache.memory, S, cache.cross_k.back().data<float>(),
                             cache.cross_v.back().data<float>(), S, 0);
  }
}

Tensor T5Stack::decode_step(Arena& arena, const Tensor& x, T5DecoderCache& cache) {
  MEGADLM_CHECK(decoder_ && cache.memory.defined(), "T5Stack::decode_step: no decoder cache (start_decoding)");
  const int64_t B = cache.B, t = cache.length;
  MEGADLM_CHECK(x.size(0) == B && t < cache.R, "T5Stack::decode_step: ", x.size(0), " rows for ", B,
                " sequences, at row ", t, " of a cache of ", cache.R);
  const Backend& be = backend_of(x);
  // The new row (query position t) against the cached rows 0 .. t, itself included: no future key.
  const Tensor bias = bias_.query_row(arena, t, t + 1);
  T5AttentionGeometry self{B, 1, t + 1, bias.data<float>(), nullptr, false};
  self.key_rows = cache.R;
  const T5AttentionGeometry cross{B, 1, cache.S, nullptr,
                                  cache.memory_mask.empty() ? nullptr : cache.memory_mask.data(), false};
  auto residual = [&](Tensor y, const Tensor& h) {  // y := h + y
    be.add_inplace(y.data<float>(), h.data<float>(), y.numel());
    return y;
  };
  Tensor h = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& y = layers_[l];
    const Tensor a = y.self_norm.forward(arena, h);
    float *k = cache.self_k[l].data<float>(), *v = cache.self_v[l].data<float>();
    y.self_attn.keys_values(arena, a, 1, k, v, cache.R, t);
    h = residual(y.self_attn.forward_cached(arena, a, k, v, self), h);
    h = residual(y.cross_attn.forward_cached(arena, y.cross_norm.forward(arena, h), cache.cross_k[l].data<float>(),
                                             cache.cross_v[l].data<float>(), cross),
                 h);
    h = residual(y.mlp.forward(arena, y.ff_norm.forward(arena, h)), h);
  }
  ++cache.length;
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
