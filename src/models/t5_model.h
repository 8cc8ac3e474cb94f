#pragma once
// The T5 family's model (HuggingFace's T5ForConditionalGeneration), built from a t5_model_spec
// (models/t5_spec.h): one token embedding (embed_tokens [V, C]) read by both stacks, the encoder stack
// and the decoder stack (nn/t5_stack.h), and the output: the decoder's output, times C^-0.5 where
// T5Options::scale_output says, times the output matrix's transpose, embed_tokens (tied) or an lm_head
// [V, C] of its own (untied). On the CPU, in fp32 or under a precision policy (set_precision: every
// Linear product and the output matrix's in bf16 as the decoders' are, nn/precision.h), with activation
// recomputation per stack (set_recompute, nn/t5_stack.h); docs/t5.md says what is left.
// Tensor parallelism: the stacks split heads and feed-forward columns (nn/t5_stack.h); the embedding
// and the output matrix are vocab-parallel, rank r holding rows balanced_rows(V, tp, r) (Vl of them)
// of each: the embedding's rows are summed over tp, the logits stay this rank's columns [B*T, Vl] for
// the vocab-parallel cross-entropy (nn/vocab_parallel_cross_entropy.h) and are gathered only for
// forward_logits; the head's input gradient is summed over tp. Every rank returns the same losses.
// The loss is the sum of the softmax cross-entropy over the labelled decoder rows (label -100: none).
// Padding: the masks give 1 for a token and 0 for padding; a padded key is seen by no query (the
// encoder's padding also in the decoder's cross-attention). A padded row's own output is not T5's
// concern: it carries no loss.
// Generation (start_generation, decode_step_logits): the encoder once per batch of prompts, then the
// decoder one row a step against a T5DecoderCache (nn/t5_stack.h); forward only.
// Legend: B sequences, S encoder rows and T decoder rows a sequence, C hidden, V vocabulary, Vl this
// rank's rows of it.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/parameters.h"
#include "models/t5_spec.h"
#include "nn/output_products.h"
#include "nn/precision.h"
#include "nn/recompute.h"
#include "nn/t5_stack.h"

namespace megadlm {

// Host arrays.
struct T5Batch {
  int64_t B = 0, S = 0, T = 0;
  std::vector<int32_t> encoder_tokens;  // [B*S]
  std::vector<int32_t> encoder_mask;    // [B*S] 1 token, 0 padding; empty: no padding
  std::vector<int32_t> decoder_tokens;  // [B*T] the decoder's inputs (the labels shifted right)
  std::vector<int32_t> decoder_mask;    // [B*T] 1 token, 0 padding; empty: no padding
  std::vector<int32_t> labels;          // [B*T] in [0, V) or -100 (no loss); empty: forward only
};

class T5Model {
 public:
  // spec: t5_model_spec(cfg, opt).
  T5Model(const TransformerConfig& cfg, const T5Options& opt, const ParallelContext& ctx);
  // The modules keep pointers to this model's context: not copied or moved.
  T5Model(const T5Model&) = delete;
  T5Model& operator=(const T5Model&) = delete;

  const TransformerConfig& config() const { return cfg_; }
  const T5Options& options() const { return opt_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  bool tied() const { return tied_; }

  // The decoder's logits [B*T, V] (arena, valid until the next call; gathered over tp).
  Tensor forward_logits(const T5Batch& batch);
  // The loss (sum of CE over the labelled decoder rows), without gradients.
  double forward_loss(const T5Batch& batch);
  // The loss, and every parameter's gradient accumulated (dlogits scaled by grad_scale): the head, the
  // decoder, the memory's gradient into the encoder, the shared embedding from both stacks.
  double forward_backward(const T5Batch& batch, float grad_scale);

  // Generation: encoder_tokens [B*S] and encoder_mask [B*S] (empty: no padding) through the encoder ->
  // cache, with room for `steps` decoder rows a sequence.
  void start_generation(const std::vector<int32_t>& encoder_tokens, const std::vector<int32_t>& encoder_mask,
                        int64_t B, int64_t S, int64_t steps, T5DecoderCache& cache);
  // tokens [B]: each sequence's decoder input at row cache.length -> the logits of that row [B, V]
  // (arena, valid until the next call; gathered over tp); the cache grows by the row.
  Tensor decode_step_logits(const std::vector<int32_t>& tokens, T5DecoderCache& cache);
  // The precision policy of the stacks' Linear products and the output matrix's (fp32 until set); the
  // embedding, the norms, the attention's scores and softmax and the loss stay fp32. After any change
  // of the weights call precision()->weights_updated() (the trainer does after each step and a load).
  void set_precision(const PrecisionConfig& cfg);
  MixedPrecision* precision() { return precision_.get(); }
  // Activation recomputation of both stacks' layers, each stack counting its own (nn/t5_stack.h).
  void set_recompute(const RecomputeConfig& cfg);
  // High-water bytes of the arena so far (the T5 modules make no use of the policy's transient arena).
  double activation_high_water() const { return static_cast<double>(arena_.high_water()); }

 private:
  void check(const T5Batch& b, bool labels) const;
  Tensor embed(const std::vector<int32_t>& tokens);                      // -> [n, C] (arena)
  void embed_backward(const std::vector<int32_t>& tokens, const Tensor& dx);
  Tensor decode(const T5Batch& b);  // both stacks -> the decoder's output [B*T, C]; saves the inputs
  Tensor logits(const Tensor& h);   // [B*T, C] -> this rank's [B*T, Vl]; saves the head's input
  float output_scale() const;       // C^-0.5 in fp32, or 1
  // The logits' CE in place; with dh, dlogits (scaled by grad_scale) back through the head into dh.
  double head_loss(const T5Batch& b, Tensor& logits, float grad_scale, Tensor* dh);

  TransformerConfig cfg_;
  T5Options opt_;
  ParallelContext ctx_;
  ParamStore params_;
  Arena arena_;
  bool tied_ = true;
  int embed_ = -1;   // embed_tokens.weight, this rank's rows [Vl, C]
  int output_ = -1;  // the output matrix [Vl, C]: embed_ (tied) or lm_head.weight (untied)
  int64_t vocab_start_ = 0, V_local_ = 0;  // this rank's rows [vocab_start_, vocab_start_ + Vl) of both
  T5Stack encoder_, decoder_;
  OutputProducts head_;  // the output matrix's products
  std::unique_ptr<MixedPrecision> precision_;
  // Saved by decode / logits.
  T5StackInputs enc_in_, dec_in_;
  Tensor memory_grad_, head_in_;  // head_in_: the decoder's output as the output matrix reads it (scaled)
};

}  // namespace megadlm
