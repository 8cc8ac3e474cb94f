#pragma once
// One transformer layer, assembled from its LayerSpec as a sequence of residual branches, each a norm and
// a module (nn/sublayer.h):
//   self-attention          name.input_layernorm            name.self_attn
//   cross-attention (spec)  name.pre_cross_attn_layernorm   name.cross_attn
//   feed-forward            name.post_attention_layernorm   name.mlp   (MLP or MoE block)
// Pre-norm branch:  y = x + f(norm(x)).   Post-norm branch:  y = norm(x + f(x)).
// Legend: N = B*T rows, C hidden.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "nn/module_specs.h"
#include "nn/moe/moe_layer.h"
#include "nn/norm.h"
#include "nn/sublayer.h"

namespace megadlm {

// A norm over the hidden size as the transformer's layers and stacks make them: LayerNorm with its
// bias, or RMSNorm, with the config's epsilon; its weight gradients summed over tp under sequence
// parallelism.
Norm make_norm(ParamStore& store, const ParallelContext& ctx, const std::string& name, NormKind kind,
               const TransformerConfig& cfg);

class TransformerLayer {
 public:
  // output_init_std: the init of the projections that write into the residual stream (Megatron scales
  // them by 1/sqrt(2 L) for a stack of L layers).
  TransformerLayer(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                   const TransformerConfig& cfg, const LayerSpec& spec, float output_init_std);

  Tensor forward(Arena& arena, const Tensor& x, const BatchInfo& batch);  // x [N, C] -> y [N, C]
  // Inference with a KV cache (Sublayer::forward_cached): x [B*Tn, C] -> y [B*Tn, C].
  Tensor forward_cached(Arena& arena, const Tensor& x, const BatchInfo& batch, const CacheRows& cache);
  // dy [N, C] -> dx [N, C] written; dx must not alias dy.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx);

  MoELayer* moe() { return moe_; }  // the feed-forward block when it is MoE, else null
  // The precision policy of the modules' products (nn/precision.h). Under a policy the fp32 values the
  // layer does not keep (norm outputs read only by Linear layers, which keep their own narrow copies)
  // and the backward's temporaries live in the policy's transient arena (one layer's worth).
  void set_precision(MixedPrecision* p);

 private:
  // One residual branch: the norm and the module it wraps.
  struct Branch {
    Norm norm;
    std::unique_ptr<Sublayer> module;
    // With a cache, the module's KV-cached forward (inference).
    Tensor forward(Arena& arena, Arena& out_arena, const Tensor& x, const BatchInfo& batch, NormPlacement at,
                   const CacheRows* cache = nullptr);
    // dy -> dx written; tmp [N, C] is scratch.
    void backward(Arena& arena, const Tensor& dy, Tensor& dx, Tensor& tmp, NormPlacement at);
  };
  // Registers the branch's norm, then makes its module (the parameters' order in the flat buffers).
  void add_branch(ParamStore& store, const ParallelContext& ctx, const std::string& norm_name,
                  const TransformerConfig& cfg, const std::function<std::unique_ptr<Sublayer>()>& make);

  NormSpec norm_;
  std::vector<Branch> branches_;  // in forward order
  MoELayer* moe_ = nullptr;       // owned by its branch
  MixedPrecision* prec_ = nullptr;  // null: fp32
};

}  // namespace megadlm
