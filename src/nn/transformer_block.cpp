#include "nn/transformer_block.h"

#include <cmath>

namespace megadlm {

TransformerBlock::TransformerBlock(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg,
                                   const StackSpec& spec, LayerRange range) {
  // Megatron scales the init of the projections that write into the residual stream by 1/sqrt(2L).
  const float out_std = cfg.init_method_std / std::sqrt(2.0f * static_cast<float>(spec.num_layers));
  for (int64_t l = range.begin; l < range.end; ++l) {
    first_param_.push_back(store.count());
    layers_.push_back(std::make_unique<TransformerLayer>(store, ctx, spec.prefix + "." + std::to_string(l), cfg,
                                                         spec.layer(l), out_std));
  }
}

std::vector<MoELayer*> TransformerBlock::moe_layers() {
  std::vector<MoELayer*> out;
  for (auto& layer : layers_)
    if (layer->moe()) out.push_back(layer->moe());
  return out;
}

void TransformerBlock::set_precision(MixedPrecision* p) {
  for (auto& layer : layers_) layer->set_precision(p);
}

void TransformerBlock::set_recompute(const RecomputeConfig& cfg) {
  recompute_start_ = recomputed_group_starts(cfg, size());
}

Tensor TransformerBlock::forward_layers(Arena& arena, int64_t first, int64_t last, Tensor x,
                                        const BatchInfo& batch) {
  for (int64_t l = first; l <= last; ++l) x = layers_[static_cast<size_t>(l)]->forward(arena, x, batch);
  return x;
}

// Under full recomputation each recomputed group keeps only its input (nn/recompute.h).
Tensor TransformerBlock::forward(Arena& arena, Tensor x, const BatchInfo& batch) {
  return forward_with_recompute(arena, recompute_start_, size(), x, group_inputs_,
                                [&](int64_t first, int64_t last, Tensor in) {
                                  return forward_layers(arena, first, last, in, batch);
                                });
}

void TransformerBlock::backward(Arena& arena, const BatchInfo& batch, Tensor*& dy, Tensor*& dx,
                                const std::function<void(int64_t)>& after_layer) {
  backward_with_recompute(
      arena, recompute_start_, size(), group_inputs_,
      [&](int64_t first, int64_t last, Tensor in) { return forward_layers(arena, first, last, in, batch); },
      [&](int64_t l) {
        layers_[static_cast<size_t>(l)]->backward(arena, *dy, *dx);
        after_layer(l);
        std::swap(dy, dx);
      });
}

Tensor TransformerBlock::forward_cached(Arena& arena, Tensor x, const BatchInfo& batch, KVCache& cache,
                                        int64_t first_seq, const int64_t* offsets, bool causal) {
  for (int64_t l = 0; l < size(); ++l) {
    const CacheRows rows{cache.k_at(l, first_seq), cache.v_at(l, first_seq), cache.S, offsets, causal};
    x = layers_[static_cast<size_t>(l)]->forward_cached(arena, x, batch, rows);
  }
  return x;
}

}  // namespace megadlm
