#pragma once
// A decoder-only language model (GPT-2 or LLaMA/Qwen3 style, autoregressive or diffusion) built from
// a TransformerConfig and a ModelSpec of one stack and an LM head (models/model_spec.h), per pipeline
// stage: stage s of ctx.pp owns the layers
// [s L/pp, (s+1) L/pp) (pipeline_stage_layers), the first stage the embedding (pre_process), the last
// the final norm and the output layer (post_process). With one stage it owns everything.
//
// Layers keep their GLOBAL index in parameter names (layers.N...), so init (keyed by name) and
// checkpoints do not depend on the layout. With tied embeddings and pp > 1 the last stage holds its
// own copy of embed_tokens.weight for the output layer (same name, hence same init); the copies'
// gradients are summed over ctx.embd before the optimizer (pipeline_schedule.h), as in Megatron.
//
// Parameter names follow HuggingFace's LLaMA layout (embed_tokens, layers.N.self_attn.q_proj, ...),
// so checkpoints map 1:1 to HF tensor names.
//
// Device: the parameters, gradients and activations live on `device` (kernels/backend.h picks the
// kernels). On CUDA each process drives one GPU: data, tensor, pipeline and expert parallelism
// (gradient buckets, the tp mappings and the vocab-parallel loss, stage-to-stage transfers, the expert
// exchange's rows, all over NCCL). The micro-batch
// arrays stay host memory in the API: forward_stage checks the ids on the host and uploads the arrays
// into the arena, and the backward_stage / loss_stage that follow it use that copy.
#include <functional>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "nn/embedding.h"
#include "nn/kv_cache.h"
#include "nn/lm_head.h"
#include "core/parameters.h"
#include "models/embedding_inserts.h"
#include "models/micro_batch.h"
#include "models/model_spec.h"
#include "models/pipeline_stage.h"
#include "nn/norm.h"
#include "nn/precision.h"
#include "nn/recompute.h"
#include "nn/transformer_block.h"

namespace megadlm {

// The layers [begin, end) of pipeline stage `pp_rank` of `pp_size`; an Error naming both flags when
// --num-layers is not a multiple of --pipeline-model-parallel-size.
LayerRange pipeline_stage_layers(const TransformerConfig& cfg, int pp_size, int pp_rank);

class LanguageModel : public PipelineStage {
 public:
  // spec: one stack and an LM head (decoder_model_spec, gpt_model_spec, difflm_model_spec); an Error
  // otherwise. inserts: a module that computes some rows of the input embeddings (LLaVA's image
  // features, models/embedding_inserts.h), its parameters first in the store; first stage only.
  LanguageModel(const TransformerConfig& cfg, const ModelSpec& spec, const ParallelContext& ctx,
                bool pre_process = true, bool post_process = true, Device device = Device::CPU,
                const EmbeddingInsertsFactory& inserts = {});
  Device device() const override { return params_.device(); }

  const TransformerConfig& config() const { return cfg_; }
  EmbeddingInserts* inserts() { return inserts_.get(); }  // null without one
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  Arena& arena() { return arena_; }
  // High-water bytes of the activations so far: the arena, plus the precision policy's transient arena.
  double activation_high_water() const {
    return static_cast<double>(arena_.high_water()) + (precision_ ? precision_->transient_bytes() : 0.0);
  }

  // Forward and backward of one micro-batch; returns sum_n w_n CE_n. Gradients are accumulated into
  // params().grads() with dlogits multiplied by grad_scale. The arena is reset at the end.
  double forward_backward(const MicroBatch& mb, float grad_scale, float* per_token_loss = nullptr);
  // Forward only: the same loss, no gradients.
  double forward_loss(const MicroBatch& mb, float* per_token_loss = nullptr);
  // Forward to logits [B*T, V] on the host: in the arena on the CPU (valid until arena().reset()), a
  // downloaded copy on a device.
  Tensor forward_logits(const MicroBatch& mb);
  // Inference with a KV cache (nn/kv_cache.h): the mb.T new tokens of each of the mb.B sequences go
  // to cache rows offsets[b] .. offsets[b]+T of cache sequences first_seq .. first_seq+B; their
  // queries attend causally or to every written row [0, offsets[b]+T). Returns logits [B*T, V], or
  // [B, V] of each sequence's last new row when last_only, on the host as forward_logits. offsets [B]
  // is a host array.
  Tensor forward_logits_cached(const MicroBatch& mb, KVCache& cache, int64_t first_seq, const int64_t* offsets,
                               bool causal, bool last_only);
  // Makes `cache` hold `batch` sequences of `capacity` rows for this model, on its device.
  void allocate_cache(KVCache& cache, int64_t batch, int64_t capacity) const;
  // The MoE blocks of the layers that have one, in layer order (empty for a dense model).
  std::vector<MoELayer*> moe_layers();
  // Data parallelism's overlap hook: during a backward, called with k whenever the parameters with
  // id >= k have their final gradients for this micro-batch (after the final norm, after each layer,
  // k = 0 at the end). Ids grow in registration order (embedding, layers, final norm, head), so a
  // tied embedding is final only at the end.
  void set_grads_ready_hook(std::function<void(int first_final_param)> hook) { grads_ready_ = std::move(hook); }

  // The precision policy of the Linear layers' products (nn/precision.h); fp32 until set. After any
  // change of the weights call precision()->weights_updated() (the trainer does after each step).
  void set_precision(const PrecisionConfig& cfg);
  MixedPrecision* precision() { return precision_.get(); }
  // Activation recomputation in forward_backward (nn/recompute.h).
  void set_recompute(const RecomputeConfig& cfg);

  // ---- The pipeline stage (models/pipeline_stage.h; train/pipeline_schedule.h drives it). Activations
  // are [N, C], N = B*T; input, output_grad and input_grad live on the model's device.
  bool is_first_stage() const override { return pre_process_; }
  bool is_last_stage() const override { return post_process_; }
  LayerRange layers() const { return layer_range_; }
  int64_t activation_floats(const MicroBatch& mb) const override;
  // Forward of this stage: from mb.tokens on the first stage, else from `input` [N, C] (the previous
  // stage's output; copied into the arena). Returns the output [N, C] in the arena: the last layer's
  // output, or on the last stage the final norm's (the head runs in backward_stage / loss_stage,
  // since the fused cross-entropy computes the loss and dlogits in one pass).
  Tensor forward_stage(const MicroBatch& mb, const float* input) override;
  // Backward of the forward_stage just run (no other forward in between: layers keep their saved
  // activations in members). On the last stage it starts from the loss (returned; output_grad
  // unused), else from output_grad [N, C]. Writes input_grad [N, C] on a non-first stage (the first
  // stage ends in the embedding). Accumulates parameter gradients; resets the arena.
  double backward_stage(const MicroBatch& mb, const Tensor& out, const float* output_grad, float grad_scale,
                        float* input_grad, float* per_token_loss = nullptr) override;
  // Last stage, forward only: the loss of `out` (from forward_stage). Resets the arena.
  double loss_stage(const MicroBatch& mb, const Tensor& out, float* per_token_loss = nullptr) override;
  void release_activations() override { arena_.reset(); }
  // The gradient of the word-embedding matrix this stage shares with the other end of the pipeline
  // (tied embeddings, pp > 1, first or last stage); undefined otherwise.
  Tensor shared_gradient() override { return shared_embedding_ >= 0 ? params_.grad(shared_embedding_) : Tensor(); }
  int shared_embedding_id() const { return shared_embedding_; }

 private:
  Tensor forward_hidden(const MicroBatch& mb);  // whole model (one stage), through the final norm
  // A micro-batch's arrays where the kernels read them: the host vectors themselves on the CPU; on a
  // device, copies uploaded into the arena (the ids checked on the host first), kept for the
  // backward_stage / loss_stage of the same micro-batch.
  struct Staged {
    const int32_t* tokens = nullptr;
    const int32_t* targets = nullptr;
    const float* weights = nullptr;
    BatchInfo info;
  };
  static Staged host_arrays(const MicroBatch& mb);  // mb's own arrays
  Staged stage(const MicroBatch& mb);         // forward_stage: uploads on a device
  Staged staged(const MicroBatch& mb) const;  // backward_stage, loss_stage: what stage() made for mb
  Tensor logits_on_host(const Tensor& logits) const;  // itself on the CPU, a downloaded copy on a device
  Staged staged_;
  const int32_t* staged_from_ = nullptr;  // the host tokens staged_ was made from
  TransformerConfig cfg_;
  ParallelContext ctx_;
  ParamStore params_;
  Arena arena_;
  bool pre_process_, post_process_;
  LayerRange layer_range_;
  int shared_embedding_ = -1;
  std::unique_ptr<EmbeddingInserts> inserts_;
  Embedding embedding_;
  TransformerBlock decoder_;  // this stage's layers
  Norm final_norm_;
  LMHead head_;
  std::unique_ptr<MixedPrecision> precision_;
  Arena& work_arena();
  int final_norm_first_param_ = 0;
  std::function<void(int)> grads_ready_;
};

// Checks that the sizes are consistent (heads divide hidden, groups divide heads, ...), with an Error
// naming the flag at fault.
void validate_config(const TransformerConfig& cfg);
int64_t parameter_count(const TransformerConfig& cfg);

}  // namespace megadlm
