#pragma once
// A stack of transformer layers built from a StackSpec (Megatron-core's TransformerBlock): the layers
// [range.begin, range.end) of the stack that this pipeline stage owns, run forward and backward in
// order, with activation recomputation (nn/recompute.h). Layers keep their index in the whole stack in
// their parameter names (`prefix`.N...), so init and checkpoints do not depend on the layout.
// Legend: N = B*T rows (N/tp under sequence parallelism), C hidden.
#include <functional>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "nn/kv_cache.h"
#include "nn/module_specs.h"
#include "nn/recompute.h"
#include "nn/transformer_layer.h"

namespace megadlm {

// Layers [begin, end) of a stack.
struct LayerRange {
  int64_t begin = 0, end = 0;
};

class TransformerBlock {
 public:
  TransformerBlock() = default;
  TransformerBlock(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg, const StackSpec& spec,
                   LayerRange range);

  int64_t size() const { return static_cast<int64_t>(layers_.size()); }
  // The id of local layer l's first parameter (ids grow in registration order).
  int first_param(int64_t l) const { return first_param_[static_cast<size_t>(l)]; }

  // x [N, C] through the layers; their activations stay in the arena. Under full recomputation each
  // recomputed group keeps only its input and frees the rest.
  Tensor forward(Arena& arena, Tensor x, const BatchInfo& batch);
  // The backward from *dy, recomputing groups first: dy and dx ping-pong (swapped after each layer), so
  // the input gradient ends in *dy. after_layer(l) runs once local layer l's gradients are final.
  void backward(Arena& arena, const BatchInfo& batch, Tensor*& dy, Tensor*& dx,
                const std::function<void(int64_t l)>& after_layer);
  // Inference with a KV cache (nn/kv_cache.h): the batch's sequences are cache sequences first_seq ..
  // first_seq + B; their new rows go to rows offsets[b] .. (host array).
  Tensor forward_cached(Arena& arena, Tensor x, const BatchInfo& batch, KVCache& cache, int64_t first_seq,
                        const int64_t* offsets, bool causal);

  void set_recompute(const RecomputeConfig& cfg);
  void set_precision(MixedPrecision* p);
  // The MoE blocks of the layers that have one, in layer order.
  std::vector<MoELayer*> moe_layers();

 private:
  // Runs layers [first, last] forward from x.
  Tensor forward_layers(Arena& arena, int64_t first, int64_t last, Tensor x, const BatchInfo& batch);

  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::vector<int> first_param_;          // per layer
  std::vector<int64_t> recompute_start_;  // per layer: first layer of its recomputed group, or -1
  std::vector<Tensor> group_inputs_;      // per layer: the kept input of a recomputed group
};

}  // namespace megadlm
