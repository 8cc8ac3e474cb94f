#include "nn/transformer_layer.h"

#include <cmath>

#include "kernels/backend.h"

namespace megadlm {

static TransformerConfig apply_spec(TransformerConfig cfg, const LayerSpec& spec) {
  cfg.normalization = spec.norm;
  cfg.attention_mask = spec.attention_mask;
  cfg.attention_block_size = spec.attention_block_size;
  cfg.qk_layernorm = spec.qk_norm;
  cfg.activation = spec.activation;
  return cfg;
}

TransformerLayer::TransformerLayer(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                                   const TransformerConfig& config, const LayerSpec& spec) {
  const TransformerConfig cfg = apply_spec(config, spec);
  // Megatron scales the init of the projections that write into the residual stream by 1/sqrt(2L).
  const float out_std = cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
  const bool norm_bias = cfg.normalization == NormKind::LayerNorm;
  input_norm_ = Norm(store, name + ".input_layernorm", cfg.normalization, cfg.hidden_size, cfg.norm_epsilon, norm_bias,
                     &ctx);
  attn_ = SelfAttention(store, ctx, name + ".self_attn", cfg, out_std);
  post_attention_norm_ = Norm(store, name + ".post_attention_layernorm", cfg.normalization, cfg.hidden_size,
                              cfg.norm_epsilon, norm_bias, &ctx);
  // A MoE block routes the rows it is given; its router statistics need all of them.
  MEGADLM_CHECK(spec.mlp != MlpKind::MoE || !(ctx.sequence_parallel && ctx.tp.size > 1),
                name, ": --sequence-parallel is not supported with MoE layers (--num-experts)");
  if (spec.mlp == MlpKind::MoE) moe_ = std::make_unique<MoELayer>(store, ctx, name + ".mlp", cfg, out_std);
  else mlp_ = MLP(store, ctx, name + ".mlp", cfg, cfg.ffn_hidden_size, out_std);
}

Tensor TransformerLayer::mlp_forward(Arena& arena, const Tensor& x, const BatchInfo& batch) {
  return moe_ ? moe_->forward(arena, x, batch) : mlp_.forward(arena, x);
}

Tensor TransformerLayer::forward(Arena& arena, const Tensor& x, const BatchInfo& batch) {
  // Under a precision policy the norm outputs are read only by Linear layers, which keep their own
  // narrow copies: the fp32 outputs go to the transient arena (not for MoE, whose experts stay fp32
  // and keep a view of their input).
  Arena& tmp = prec_ ? prec_->transient() : arena;
  const Backend& be = backend_of(x);
  const size_t mark = tmp.mark();
  Tensor a = attn_.forward(arena, input_norm_.forward(arena, x, tmp), batch);
  be.add_inplace(a.data<float>(), x.data<float>(), a.numel());  // a := x1 = x + attn
  Tensor m = mlp_forward(arena, post_attention_norm_.forward(arena, a, moe_ ? arena : tmp), batch);
  be.add_inplace(m.data<float>(), a.data<float>(), m.numel());  // m := y = x1 + mlp
  if (prec_) tmp.release(mark);
  return m;
}

Tensor TransformerLayer::forward_cached(Arena& arena, const Tensor& x, const BatchInfo& batch, float* k_cache,
                                        float* v_cache, int64_t S, const int64_t* offsets, bool causal) {
  const Backend& be = backend_of(x);
  Tensor a = attn_.forward_cached(arena, input_norm_.forward(arena, x), batch, k_cache, v_cache, S, offsets, causal);
  be.add_inplace(a.data<float>(), x.data<float>(), a.numel());
  Tensor m = mlp_forward(arena, post_attention_norm_.forward(arena, a), batch);
  be.add_inplace(m.data<float>(), a.data<float>(), m.numel());
  return m;
}

void TransformerLayer::backward(Arena& model_arena, const Tensor& dy, Tensor& dx) {
  // The temporaries: from the transient arena under a precision policy (the forward's fp32 values
  // there are gone by now), so that they do not add to the saved activations.
  Arena& arena = prec_ ? prec_->transient() : model_arena;
  const size_t mark = arena.mark();
  const Backend& be = backend_of(dy);
  Tensor tmp = arena.tensor(dy.shape());
  Tensor dx1 = arena.tensor(dy.shape());
  // dx1 = dy + norm2^T(mlp^T(dy))
  if (moe_) moe_->backward(arena, dy, tmp);
  else mlp_.backward(arena, dy, tmp);
  post_attention_norm_.backward(tmp, dx1);
  be.add_inplace(dx1.data<float>(), dy.data<float>(), dx1.numel());
  // dx = dx1 + norm1^T(attn^T(dx1))
  attn_.backward(arena, dx1, tmp);
  input_norm_.backward(tmp, dx);
  be.add_inplace(dx.data<float>(), dx1.data<float>(), dx.numel());
  arena.release(mark);
}

}  // namespace megadlm
