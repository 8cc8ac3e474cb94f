#pragma once
// One pre-norm decoder layer:  x1 = x + attn(norm1(x));  y = x1 + mlp(norm2(x1)).
// Legend: N = B*T tokens, C hidden.
#include <string>

#include "core/arena.h"
#include "nn/attention.h"
#include "nn/layer_spec.h"
#include "nn/mlp.h"
#include "nn/moe/moe_layer.h"
#include "nn/norm.h"

namespace megadlm {

class TransformerLayer {
 public:
  TransformerLayer(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                   const TransformerConfig& cfg, const LayerSpec& spec);

  Tensor forward(Arena& arena, const Tensor& x, const BatchInfo& batch);  // x [N, C] -> y [N, C]
  // Inference with a KV cache (see SelfAttention::forward_cached): x [B*Tn, C] -> y [B*Tn, C].
  Tensor forward_cached(Arena& arena, const Tensor& x, const BatchInfo& batch, float* k_cache, float* v_cache,
                        int64_t S, const int64_t* offsets, bool causal);
  // dy [N, C] -> dx [N, C] written; dx must not alias dy.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx);

  MoELayer* moe() { return moe_.get(); }  // null for a dense layer
  // The precision policy of the attention and MLP projections (MoE experts stay fp32).
  // Under a policy the fp32 values the layer does not keep (norm outputs, q/k/v, attention output,
  // MLP hidden) and its backward's temporaries live in the policy's transient arena (one layer's worth).
  void set_precision(MixedPrecision* p) {
    prec_ = p && p->mode() != PrecisionMode::FP32 ? p : nullptr;
    attn_.set_precision(p);
    mlp_.set_precision(p);
  }

 private:
  Tensor mlp_forward(Arena& arena, const Tensor& x, const BatchInfo& batch);  // dense MLP or MoE
  Norm input_norm_, post_attention_norm_;
  SelfAttention attn_;
  MLP mlp_;
  std::unique_ptr<MoELayer> moe_;  // replaces mlp_ when the spec says MlpKind::MoE
  MixedPrecision* prec_ = nullptr;  // null: fp32
};

}  // namespace megadlm
