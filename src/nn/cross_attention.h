#pragma once
// Cross-attention (T5's decoder, Megatron-core's CrossAttention): queries from the layer's input x,
// keys and values from another stack's output, the memory (BatchInfo::memory, the encoder's output);
// every key of a sequence's memory is visible to every query of that sequence. Projections as in
// self-attention (q from x, k and v from the memory, column-parallel; o row-parallel), no position
// embedding. Grouped-query attention when K < H.
//
// The attention itself is the slow, obvious form: per (sequence, head) the scores [T, S] as one
// product, a row softmax (Backend::softmax_forward), and the output as a second product; the
// probabilities [B, H, T, S] are kept for the backward. Everything goes through the Backend, so it runs
// on any device.
// Tensor parallelism: each rank computes H/tp heads and their K/tp groups; the gradients of x and of
// the memory are summed over the tp ranks. Sequence parallelism is refused.
// Legend: B batch, T query rows per sequence, S memory rows per sequence, N = B*T, M = B*S, C hidden,
// H heads, K kv heads, D head dim.
#include <string>

#include "core/arena.h"
#include "nn/attention_projections.h"
#include "nn/linear.h"
#include "nn/sublayer.h"

namespace megadlm {

class CrossAttention : public Sublayer {
 public:
  CrossAttention(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                 const TransformerConfig& cfg, float output_init_std);

  // x [N, C], batch.memory [M, C] -> y [N, C]. Saves q, k, v, the probabilities and the batch.
  Tensor forward(Arena& arena, const Tensor& x, const BatchInfo& batch) override;
  // dy [N, C] -> dx [N, C] written; the memory's gradient [M, C] added to batch.memory_grad.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx) override;
  void set_precision(MixedPrecision* p) override;

 private:
  std::string name_;
  const ParallelContext* ctx_ = nullptr;
  int64_t C_ = 0, H_ = 0, K_ = 0, D_ = 0;  // this rank's heads and groups (H/tp, K/tp)
  AttentionProjections proj_;  // q, k, v, o
  // Saved by forward.
  BatchInfo batch_;
  Tensor q_, k_, v_;  // [N, H*D], [M, K*D], [M, K*D]
  Tensor probs_;      // [B, H, T, S]
};

}  // namespace megadlm
