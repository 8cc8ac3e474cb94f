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
  recompute_start_ = recompute_group_starts(cfg, size());
  bool any = false;
  for (int64_t s : recompute_start_) any = any || s >= 0;
  if (!any) recompute_start_.clear();
}

Tensor TransformerBlock::forward_layers(Arena& arena, int64_t first, int64_t last, Tensor x,
                                        const BatchInfo& batch) {
  for (int64_t l = first; l <= last; ++l) x = layers_[static_cast<size_t>(l)]->forward(arena, x, batch);
  return x;
}

Tensor TransformerBlock::forward(Arena& arena, Tensor x, const BatchInfo& batch) {
  const int64_t L = size();
  if (recompute_start_.empty()) return L > 0 ? forward_layers(arena, 0, L - 1, x, batch) : x;
  group_inputs_.assign(layers_.size(), Tensor());
  for (int64_t l = 0; l < L;) {
    if (recompute_start_[static_cast<size_t>(l)] < 0) {
      x = layers_[static_cast<size_t>(l)]->forward(arena, x, batch);
      ++l;
      continue;
    }
    // A recomputed group: its output is copied below the mark and everything else it made is freed.
    // Layers read their input without changing it, so x is still the group's input in the backward.
    const int64_t last = recompute_group_end(recompute_start_, l);
    group_inputs_[static_cast<size_t>(l)] = x;
    Tensor out = arena.tensor(x.shape());
    const size_t mark = arena.mark();
    out.copy_from(forward_layers(arena, l, last, x, batch));
    arena.release(mark);
    x = out;
    l = last + 1;
  }
  return x;
}

void TransformerBlock::backward(Arena& arena, const BatchInfo& batch, Tensor*& dy, Tensor*& dx,
                                const std::function<void(int64_t)>& after_layer) {
  for (int64_t l = size() - 1; l >= 0;) {
    const int64_t start = recompute_start_.empty() ? -1 : recompute_start_[static_cast<size_t>(l)];
    if (start < 0) {
      layers_[static_cast<size_t>(l)]->backward(arena, *dy, *dx);
      after_layer(l);
      std::swap(dy, dx);
      --l;
      continue;
    }
    // Recompute the group's forward from its saved input (the same kernels on the same values give
    // the same activations), then run its backward, then free both.
    const size_t mark = arena.mark();
    forward_layers(arena, start, l, group_inputs_[static_cast<size_t>(start)], batch);
    for (int64_t j = l; j >= start; --j) {
      layers_[static_cast<size_t>(j)]->backward(arena, *dy, *dx);
      after_layer(j);
      std::swap(dy, dx);
    }
    arena.release(mark);
    l = start - 1;
  }
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
