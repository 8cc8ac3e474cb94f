#include "nn/transformer_layer.h"

#include "kernels/backend.h"
#include "nn/attention.h"
#include "nn/cross_attention.h"
#include "nn/mlp.h"

namespace megadlm {

TransformerLayer::TransformerLayer(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                                   const TransformerConfig& cfg, const LayerSpec& spec, float output_init_std)
    : norm_(spec.norm) {
  // Each branch registers its norm, then its module: the parameters' order in the flat buffers.
  add_branch(store, ctx, name + ".input_layernorm", cfg, [&]() -> std::unique_ptr<Sublayer> {
    return std::make_unique<SelfAttention>(store, ctx, name + ".self_attn", cfg, spec.self_attention,
                                           output_init_std);
  });
  if (spec.cross_attention)
    add_branch(store, ctx, name + ".pre_cross_attn_layernorm", cfg, [&]() -> std::unique_ptr<Sublayer> {
      return std::make_unique<CrossAttention>(store, ctx, name + ".cross_attn", cfg, output_init_std);
    });
  add_branch(store, ctx, name + ".post_attention_layernorm", cfg, [&]() -> std::unique_ptr<Sublayer> {
    if (spec.mlp.kind == FeedForwardKind::Dense)
      return std::make_unique<MLP>(store, ctx, name + ".mlp", cfg, spec.mlp.activation, cfg.ffn_hidden_size,
                                   output_init_std, spec.mlp.host_activation);
    MEGADLM_CHECK(spec.mlp.host_activation == HostActivation::None, name,
                  ": the host activations (erf GELU, quick GELU) are built for the dense MLP only");
    auto moe = std::make_unique<MoELayer>(store, ctx, name + ".mlp", cfg, spec.mlp.activation, output_init_std);
    moe_ = moe.get();
    return moe;
  });
}

Norm make_norm(ParamStore& store, const ParallelContext& ctx, const std::string& name, NormKind kind,
               const TransformerConfig& cfg) {
  return Norm(store, name, kind, cfg.hidden_size, cfg.norm_epsilon, kind == NormKind::LayerNorm, &ctx);
}

void TransformerLayer::add_branch(ParamStore& store, const ParallelContext& ctx, const std::string& norm_name,
                                  const TransformerConfig& cfg, const std::function<std::unique_ptr<Sublayer>()>& make) {
  Branch b;
  b.norm = make_norm(store, ctx, norm_name, norm_.kind, cfg);
  b.module = make();
  branches_.push_back(std::move(b));
}

void TransformerLayer::set_precision(MixedPrecision* p) {
  prec_ = p && p->mode() != PrecisionMode::FP32 ? p : nullptr;
  for (Branch& b : branches_) b.module->set_precision(p);
}

Tensor TransformerLayer::Branch::forward(Arena& arena, Arena& out_arena, const Tensor& x, const BatchInfo& batch,
                                         NormPlacement at, const CacheRows* cache) {
  const Backend& be = backend_of(x);
  auto f = [&](const Tensor& in) {
    return cache ? module->forward_cached(arena, in, batch, *cache) : module->forward(arena, in, batch);
  };
  if (at == NormPlacement::Post) {
    Tensor s = f(x);
    be.add_inplace(s.data<float>(), x.data<float>(), s.numel());  // s := x + f(x)
    return norm.forward(arena, s);
  }
  // The norm's output is read only by the module: in out_arena unless the module keeps it.
  Tensor y = f(norm.forward(arena, x, module->keeps_input() ? arena : out_arena));
  be.add_inplace(y.data<float>(), x.data<float>(), y.numel());  // y := x + f(norm(x))
  return y;
}

void TransformerLayer::Branch::backward(Arena& arena, const Tensor& dy, Tensor& dx, Tensor& tmp, NormPlacement at) {
  const Backend& be = backend_of(dy);
  if (at == NormPlacement::Post) {
    norm.backward(dy, tmp);        // tmp := ds, the gradient of s = x + f(x)
    module->backward(arena, tmp, dx);
    be.add_inplace(dx.data<float>(), tmp.data<float>(), dx.numel());
    return;
  }
  module->backward(arena, dy, tmp);
  norm.backward(tmp, dx);
  be.add_inplace(dx.data<float>(), dy.data<float>(), dx.numel());
}

Tensor TransformerLayer::forward(Arena& arena, const Tensor& x, const BatchInfo& batch) {
  // Under a precision policy the norm outputs are read only by Linear layers, which keep their own
  // narrow copies: the fp32 outputs go to the transient arena, emptied when the layer is done.
  Arena& tmp = prec_ ? prec_->transient() : arena;
  const size_t mark = tmp.mark();
  Tensor h = x;
  for (Branch& b : branches_) h = b.forward(arena, tmp, h, batch, norm_.placement);
  if (prec_) tmp.release(mark);
  return h;
}

Tensor TransformerLayer::forward_cached(Arena& arena, const Tensor& x, const BatchInfo& batch,
                                        const CacheRows& cache) {
  Tensor h = x;  // inference keeps no precision policy: every value in the arena
  for (Branch& b : branches_) h = b.forward(arena, arena, h, batch, norm_.placement, &cache);
  return h;
}

void TransformerLayer::backward(Arena& model_arena, const Tensor& dy, Tensor& dx) {
  // The temporaries: from the transient arena under a precision policy (the forward's fp32 values
  // there are gone by now), so that they do not add to the saved activations.
  Arena& arena = prec_ ? prec_->transient() : model_arena;
  const size_t mark = arena.mark();
  // Between branches the gradient ping-pongs between two buffers; the first branch writes dx.
  Tensor tmp = arena.tensor(dy.shape());
  Tensor between[2] = {arena.tensor(dy.shape()), branches_.size() > 2 ? arena.tensor(dy.shape()) : Tensor()};
  const Tensor* g = &dy;
  for (size_t k = branches_.size(); k-- > 0;) {
    Tensor& out = k == 0 ? dx : between[(branches_.size() - 1 - k) % 2];
    branches_[k].backward(arena, *g, out, tmp, norm_.placement);
    g = &out;
  }
  arena.release(mark);
}

}  // namespace megadlm
