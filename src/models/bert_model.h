#pragma once
// The BERT family's model, built from a bert_model_spec (models/bert_spec.h): Embedding (words,
// positions, token types, the LayerNorm under post-norm), one TransformerBlock of bidirectional
// layers, the final norm under pre-norm, the MLM head and, when the spec has it, the pooler with the
// binary head (nn/bert_heads.h). On the CPU, in fp32 or under a precision policy (set_precision: the
// decoders' bf16, nn/precision.h) and with activation recomputation (set_recompute, nn/recompute.h);
// tensor parallel (with or without sequence parallelism) through its building blocks, one pipeline
// stage (docs/bert.md says what is left).
//
// Padding: BertBatch::attention_mask gives 1 for a token and 0 for padding (HuggingFace's
// attention_mask). The padded keys are invisible to every token's query: the attention kernels' segment
// ids carry it (0 for tokens, 1 for padding), so a padded row's query sees only the padded keys; its
// outputs are not BERT's, carry no loss and are not compared with anything.
// Legend: B sequences of T rows, N = B*T, C hidden, V vocabulary.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/parameters.h"
#include "models/bert_spec.h"
#include "nn/bert_heads.h"
#include "nn/embedding.h"
#include "nn/norm.h"
#include "nn/precision.h"
#include "nn/recompute.h"
#include "nn/transformer_block.h"

namespace megadlm {

// Host arrays of B*T entries each unless said otherwise.
struct BertBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> token_types;     // empty: all 0
  std::vector<int32_t> positions;       // empty: 0 .. T-1 in every sequence
  std::vector<int32_t> attention_mask;  // 1 token, 0 padding; empty: no padding
  std::vector<int32_t> mlm_labels;      // kMlmIgnore (-1) where no loss; empty: forward only
  std::vector<float> mlm_weights;       // per-row MLM loss weights, or empty for 1
  std::vector<int32_t> binary_labels;   // [B] 0/1 or kMlmIgnore; empty: no binary loss
};

struct BertLosses {
  double mlm = 0.0;     // sum over the labelled rows of w_n CE_n
  double binary = 0.0;  // sum over the labelled sequences of CE
};

class BertModel {
 public:
  // spec: a bert_model_spec; exact_gelu as the spec's layers (BertOptions::exact_gelu) for the MLM head.
  BertModel(const TransformerConfig& cfg, const ModelSpec& spec, const ParallelContext& ctx);
  // The modules keep pointers to this model's context: not copied or moved.
  BertModel(const BertModel&) = delete;
  BertModel& operator=(const BertModel&) = delete;

  const TransformerConfig& config() const { return cfg_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  bool has_binary_head() const { return binary_; }
  bool pre_norm() const { return pre_norm_; }
  bool exact_gelu() const { return exact_gelu_; }
  int64_t token_types() const { return embedding_.token_types(); }

  // MLM logits [N, V] (every row and column on every tp rank) and, with the binary head, binary logits
  // [B, 2] (undefined otherwise); in the arena, valid until the next call.
  struct Logits {
    Tensor mlm, binary;
  };
  Logits forward_logits(const BertBatch& batch);
  // The losses without gradients; with `logits`, also forward_logits' logits from the same pass (in
  // the arena, valid until the next call).
  BertLosses forward_loss(const BertBatch& batch, Logits* logits = nullptr);
  // The losses, and every parameter's gradient accumulated for mlm + binary (each dlogits scaled by
  // grad_scale).
  BertLosses forward_backward(const BertBatch& batch, float grad_scale);

  // The precision policy of the encoder's Linear products and the MLM head's (fp32 until set), as
  // LanguageModel's: the embedding, the norms, the attention's softmax, the losses and the pooler stay
  // fp32. After any change of the weights call precision()->weights_updated() (the trainer does after
  // each step and a checkpoint load). Under fp16 the caller scales the loss itself (grad_scale).
  void set_precision(const PrecisionConfig& cfg);
  MixedPrecision* precision() { return precision_.get(); }
  // Activation recomputation of the encoder's layers in forward_backward (nn/recompute.h).
  void set_recompute(const RecomputeConfig& cfg) { encoder_.set_recompute(cfg); }
  // High-water bytes of the activations so far: the arena, plus the precision policy's transient arena.
  double activation_high_water() const {
    return static_cast<double>(arena_.high_water()) + (precision_ ? precision_->transient_bytes() : 0.0);
  }

 private:
  // The arrays of a batch with their defaults filled in, and the segment ids of its padding.
  struct Inputs {
    std::vector<int32_t> token_types, positions, segments;
    BatchInfo batch_info(int64_t B, int64_t T) const;  // pointers into the vectors above
  };
  Inputs inputs(const BertBatch& batch) const;
  Tensor encode(const BertBatch& batch, const Inputs& in);  // -> the encoder's output [N, C]
  Logits head_logits(const BertBatch& batch, const Tensor& h);  // the heads' logits of the encoder's output
  // With dh: the heads' backward too, dh [N, C] written, dlogits scaled by grad_scale.
  BertLosses losses(const BertBatch& batch, const Tensor& h, Tensor* dh, float grad_scale);

  TransformerConfig cfg_;
  ParallelContext ctx_;
  ParamStore params_;
  Arena arena_;
  bool pre_norm_ = false, binary_ = false, exact_gelu_ = true;
  Embedding embedding_;
  TransformerBlock encoder_;
  Norm final_norm_;  // pre-norm only
  MLMHead mlm_;
  PoolerBinaryHead pooler_;
  std::unique_ptr<MixedPrecision> precision_;
};

}  // namespace megadlm
