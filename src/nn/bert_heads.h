#pragma once
// BERT's two heads over the encoder's output x [N, C] (N = B*T rows, sequence b's rows b*T .. b*T+T-1):
//   MLMHead           t = LayerNorm(GELU(x Wd^T + bd)); logits [N, V] = t E^T + b, with E the word
//                     embeddings (tied) and b an output bias [V]; the loss is the softmax cross-entropy
//                     over the labelled rows (label kMlmIgnore = -1: no loss).
//   PoolerBinaryHead  pooled [B, C] = tanh(x_first Wp^T + bp) of each sequence's first row; logits
//                     [B, 2] = pooled Wb^T + bb (next-sentence / sentence-order prediction); the
//                     loss is the 2-way cross-entropy (label -1: no loss).
// Parameter names: mlm_head.dense, mlm_head.norm, mlm_head.bias; pooler.dense, binary_head.
// On the CPU; the GELU is the exact (erf) one or the tanh approximation as the layers' (BERT
// checkpoints say "gelu" or "gelu_new"). Under --bf16 with bf16 products (MLMHead::set_precision) the
// MLM head's dense layer and its decoder multiply in bf16 as the decoders' layers and output layer do
// (nn/output_products.h); its GELU, LayerNorm and cross-entropy, the pooler and the binary head (a few
// rows a batch) stay fp32.
//
// Tensor parallelism: the decoder is vocab-parallel like LMHead's. E is this rank's shard of the word
// embeddings [Vl, C], the output bias is sharded the same way (mlm_head.bias [Vl] of [V]), each rank
// makes the logits of its columns and the cross-entropy is vocab-parallel
// (nn/vocab_parallel_cross_entropy.h); the gradient of t is a partial sum, all-reduced over tp. The
// dense layers, the LayerNorm and the pooler are replicated: every tp rank computes them on the same
// rows, so their gradients agree without a reduction (the global norm counts them once). Under
// sequence parallelism x holds this rank's N/tp rows and is all-gathered first; dx is this rank's rows.
// Legend: N rows, C hidden, V vocabulary, Vl this rank's vocabulary columns, B sequences, T rows a
// sequence.
#include <cstdint>

#include "core/arena.h"
#include "core/parameters.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/output_products.h"
#include "nn/precision.h"
#include "nn/transformer_config.h"
#include "parallel/parallel_context.h"

namespace megadlm {

constexpr int32_t kMlmIgnore = -1;  // the label of a row (MLM) or sequence (binary) without a loss

class MLMHead {
 public:
  MLMHead() = default;
  // word_embeddings_id: the tied decoder matrix, this rank's shard [Vl, C] (Embedding::word_embeddings_id()).
  // ctx must outlive the head.
  MLMHead(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg, int word_embeddings_id,
          bool exact_gelu);

  // x [N, C] (N/tp rows under sequence parallelism) -> logits [N, V] of all N rows, gathered over the
  // vocabulary shards (arena). Collective over tp.
  Tensor logits(Arena& arena, const Tensor& x);
  // sum over the labelled rows of w_n CE_n (labels [N] of all N rows, in [0, V) or kMlmIgnore; weights
  // [N] or null for 1), the same on every tp rank; only the labelled rows go through the head. With
  // dx: the backward too, dlogits scaled by grad_scale, dx (x's shape) written (zero on the unlabelled
  // rows) and the parameter gradients (the tied word embeddings' shard included) accumulated. x on the
  // host (the CPU). Collective over tp.
  double loss(Arena& arena, const Tensor& x, const int32_t* labels, const float* weights, float grad_scale,
              Tensor* dx);
  // The precision policy of the dense layer's and the decoder's products (null = fp32).
  void set_precision(MixedPrecision* p) {
    dense_.set_precision(p);
    decoder_.set_precision(p);
  }

 private:
  Tensor transform(Arena& arena, const Tensor& x);     // x -> t, saving what the backward needs
  Tensor shard_logits(Arena& arena, const Tensor& t);  // t [n, C] -> this rank's logits [n, Vl]
  ParamStore* store_ = nullptr;
  const ParallelContext* ctx_ = nullptr;
  int64_t V_ = 0, C_ = 0;
  int64_t vocab_start_ = 0, V_local_ = 0;  // this rank's columns of the vocabulary
  bool exact_gelu_ = true;
  Linear dense_;
  Norm norm_;
  int w_ = -1, b_ = -1;  // the tied decoder matrix, the output bias
  OutputProducts decoder_;  // the products of w_
  Tensor h_, t_;         // saved: the dense output (GELU's input), the transform's output
};

class PoolerBinaryHead {
 public:
  PoolerBinaryHead() = default;
  // ctx must outlive the head.
  PoolerBinaryHead(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg);

  // x [B*T, C] (B*T/tp rows under sequence parallelism) -> pooled [B, C] (arena).
  Tensor pooled(Arena& arena, const Tensor& x, int64_t B, int64_t T);
  // x -> logits [B, 2] (arena).
  Tensor logits(Arena& arena, const Tensor& x, int64_t B, int64_t T);
  // sum over the labelled sequences of CE (labels [B] in {0, 1} or kMlmIgnore). With dx: the backward
  // too, dlogits scaled by grad_scale, the gradient of the first rows ADDED to dx (x's shape; the
  // first rows this rank holds).
  double loss(Arena& arena, const Tensor& x, int64_t B, int64_t T, const int32_t* labels, float grad_scale,
              Tensor* dx);

 private:
  const ParallelContext* ctx_ = nullptr;
  int64_t C_ = 0;
  Linear dense_, binary_;
  Tensor pooled_;  // saved: tanh's output
};

}  // namespace megadlm
