#pragma once
// The module inside one residual branch of a transformer layer (self-attention, cross-attention, the
// dense MLP, the MoE block): what TransformerLayer calls, whatever the spec put there.
// Legend: N = B*T rows (this rank's N/tp under sequence parallelism), C hidden.
#include "core/arena.h"
#include "nn/precision.h"
#include "nn/transformer_config.h"

namespace megadlm {

// Where an inference-time forward writes its keys and values (nn/kv_cache.h): this layer's cache of
// the batch's sequences, [B, S, K*D] each; row offsets[b] on (a host array) takes sequence b's new rows.
struct CacheRows {
  float* k = nullptr;
  float* v = nullptr;
  int64_t S = 0;
  const int64_t* offsets = nullptr;
  bool causal = true;  // the new rows' queries see the cache causally, or every written row
};

class Sublayer {
 public:
  virtual ~Sublayer() = default;
  // x [N, C] -> y [N, C] from the arena; saves what the backward needs.
  virtual Tensor forward(Arena& arena, const Tensor& x, const BatchInfo& batch) = 0;
  // dy [N, C] -> dx [N, C] written (dx does not alias dy); parameter gradients accumulated. Temporaries
  // come from `arena` and are released before returning.
  virtual void backward(Arena& arena, const Tensor& dy, Tensor& dx) = 0;
  // Inference with a KV cache. Modules without keys and values run their forward.
  virtual Tensor forward_cached(Arena& arena, const Tensor& x, const BatchInfo& batch, const CacheRows& cache) {
    (void)cache;
    return forward(arena, x, batch);
  }
  // The precision policy of the module's products (nn/precision.h); null: fp32.
  virtual void set_precision(MixedPrecision* p) = 0;
  // Whether the module keeps a view of its input x until its backward (the MoE experts do): x must then
  // stay in the model's arena, not in a precision policy's transient one.
  virtual bool keeps_input() const { return false; }
};

}  // namespace megadlm
