#pragma once
// The BERT family's model, built from a bert_model_spec (models/bert_spec.h): Embedding (words,
// positions, token types, the LayerNorm under post-norm), one TransformerBlock of bidirectional
// layers, the final norm under pre-norm, the MLM head and, when the spec has it, the pooler with the
// binary head (nn/bert_heads.h). On the CPU, in fp32 or under a precision policy (set_precision: the
// decoders' bf16, nn/precision.h) and with activation recomputation (set_recompute, nn/recompute.h);
// tensor parallel (with or without sequence parallelism) through its building blocks.
//
// Pipeline parallelism (Megatron's split), as LanguageModel's: stage s of ctx.pp owns the layers
// pipeline_stage_layers(cfg, pp, s), the first stage the embedding, the last the final norm and both
// heads. The MLM head's decoder is tied to the word embeddings: with pp > 1 the last stage holds its
// own copy of embed_tokens.weight (add_word_embeddings), whose gradient the schedule sums with the
// first stage's over ctx.embd (train/pipeline_schedule.h). The stage interface (PipelineStage) takes
// a MicroBatch that micro_batch_of makes from a BertBatch: every stage is given the same one, so the
// padding, the token types and the labels need not travel.
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
#include "models/micro_batch.h"
#include "models/pipeline_stage.h"
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

class BertModel : public PipelineStage {
 public:
  // spec: a bert_model_spec; exact_gelu as the spec's layers (BertOptions::exact_gelu) for the MLM head.
  // Built as stage ctx.pp.rank of ctx.pp.size (an Error naming the flags when --num-layers is not a
  // multiple of --pipeline-model-parallel-size).
  BertModel(const TransformerConfig& cfg, const ModelSpec& spec, const ParallelContext& ctx);
  // The modules keep pointers to this model's context: not copied or moved.
  BertModel(const BertModel&) = delete;
  BertModel& operator=(const BertModel&) = delete;

  const TransformerConfig& config() const { return cfg_; }
  const ParallelContext& context() const { return ctx_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  bool has_binary_head() const { return binary_; }
  bool pre_norm() const { return pre_norm_; }
  bool exact_gelu() const { return exact_gelu_; }
  int64_t token_types() const { return token_types_; }

  // The micro-batch of `batch` as the stages consume it: the arrays checked, their defaults filled in
  // (token types 0, positions 0 .. T-1), the padding as segment ids (0 token, 1 padding), the MLM
  // labels as targets, the binary labels as sequence_labels.
  static void micro_batch_of(const BertBatch& batch, MicroBatch& mb);

  // ---- The whole model (one pipeline stage).
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
  // ---- The pipeline stage (models/pipeline_stage.h; train/pipeline_schedule.h drives it). Activations
  // are [N, C] (N/tp rows under sequence parallelism); mb comes from micro_batch_of.
  Device device() const override { return params_.device(); }
  bool is_first_stage() const override { return pre_process_; }
  bool is_last_stage() const override { return post_process_; }
  LayerRange layers() const { return layer_range_; }
  int64_t activation_floats(const MicroBatch& mb) const override;
  // From the tokens on the first stage, else from `input` (copied into the arena). Returns the
  // encoder's output [N, C] in the arena (on the last stage through the final norm under pre-norm);
  // the heads run in backward_stage / loss_stage / stage_losses.
  Tensor forward_stage(const MicroBatch& mb, const float* input) override;
  // Returns mlm + binary on the last stage (0 elsewhere) and keeps the two for take_stage_losses.
  // per_token_loss: not available for BERT (must be null).
  double backward_stage(const MicroBatch& mb, const Tensor& out, const float* output_grad, float grad_scale,
                        float* input_grad, float* per_token_loss = nullptr) override;
  double loss_stage(const MicroBatch& mb, const Tensor& out, float* per_token_loss = nullptr) override;
  void release_activations() override { arena_.reset(); }
  // The gradient of this stage's copy of the tied word embeddings (pp > 1, first or last stage).
  Tensor shared_gradient() override { return shared_embedding_ >= 0 ? params_.grad(shared_embedding_) : Tensor(); }
  int shared_embedding_id() const { return shared_embedding_; }
  // Last stage, forward only: the two losses of `out` (forward_stage's) and, with `logits`, the heads'
  // logits (in the arena until the next reset).
  BertLosses stage_losses(const MicroBatch& mb, const Tensor& out, Logits* logits);
  // The losses of the backward_stage calls since the last take, in their order (empty on a stage that
  // is not the last).
  std::vector<BertLosses> take_stage_losses();

 private:
  // The heads' logits of the encoder's output h.
  Logits head_logits(const MicroBatch& mb, const Tensor& h);
  // With dh: the heads' backward too, dh [N, C] written, dlogits scaled by grad_scale.
  BertLosses losses(const MicroBatch& mb, const Tensor& h, Tensor* dh, float grad_scale);
  // backward_stage's work: from the heads' losses (last stage) or output_grad down to the embedding or
  // input_grad; resets the arena.
  BertLosses backward(const MicroBatch& mb, const Tensor& out, const float* output_grad, float grad_scale,
                      float* input_grad);
  Tensor forward_whole(const MicroBatch& mb);  // forward_stage of a one-stage model, the arena reset first

  TransformerConfig cfg_;
  ParallelContext ctx_;
  ParamStore params_;
  Arena arena_;
  bool pre_norm_ = false, binary_ = false, exact_gelu_ = true;
  bool pre_process_ = true, post_process_ = true;
  int64_t token_types_ = 0;
  LayerRange layer_range_;
  int shared_embedding_ = -1;
  std::vector<BertLosses> stage_losses_;
  Embedding embedding_;  // first stage
  TransformerBlock encoder_;  // this stage's layers
  Norm final_norm_;  // pre-norm, last stage
  MLMHead mlm_;  // last stage
  PoolerBinaryHead pooler_;  // last stage, with the binary head
  std::unique_ptr<MixedPrecision> precision_;
};

}  // namespace megadlm
