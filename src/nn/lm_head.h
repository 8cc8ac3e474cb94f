#pragma once
// The output layer: logits = x W^T with W the word embeddings (tied) or a separate output matrix,
// then the fused softmax cross-entropy with per-token weights. The logits buffer is reused in place
// for dlogits. Legend: N tokens, C hidden, V vocabulary.
#include "core/arena.h"
#include "nn/parameters.h"
#include "nn/transformer_config.h"

namespace megadlm {

class LMHead {
 public:
  LMHead() = default;
  // tied_weight_id: the word-embedding parameter when tied, else -1 (a separate lm_head is made).
  LMHead(ParamStore& store, const TransformerConfig& cfg, int tied_weight_id);

  // x [N, C] -> logits [N, V] (arena).
  Tensor logits(Arena& arena, const Tensor& x);
  // Loss sum_n w_n CE_n over targets [N] (ignore_index -100) and weights [N] (null = 1); then the
  // backward: dx [N, C] written, output weight gradient accumulated. grad_scale multiplies dlogits.
  double loss_and_backward(Arena& arena, const Tensor& x, const int32_t* targets, const float* weights,
                           float grad_scale, Tensor& dx, float* per_token_loss);

 private:
  ParamStore* store_ = nullptr;
  int64_t V_ = 0, C_ = 0;
  int w_ = -1;
};

}  // namespace megadlm
