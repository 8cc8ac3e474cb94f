#pragma once
// A decoder-only language model (GPT-2 or LLaMA/Qwen3 style, autoregressive or diffusion) built from
// a TransformerConfig and a LayerSpec, per pipeline stage: the first stage owns the embedding
// (pre_process), the last the final norm and the output layer (post_process). With one stage it owns
// everything.
//
// Parameter names follow HuggingFace's LLaMA layout (embed_tokens, layers.N.self_attn.q_proj, ...),
// so checkpoints map 1:1 to HF tensor names.
#include <memory>
#include <vector>

#include "core/arena.h"
#include "nn/embedding.h"
#include "nn/kv_cache.h"
#include "nn/lm_head.h"
#include "nn/norm.h"
#include "nn/parameters.h"
#include "nn/transformer_layer.h"

namespace megadlm {

// One micro-batch as the model consumes it. All arrays are [B*T].
struct MicroBatch {
  int64_t B = 0, T = 0;
  const int32_t* tokens = nullptr;       // input ids (for DLM: with masks applied)
  const int32_t* positions = nullptr;    // position ids
  const int32_t* segment_ids = nullptr;  // document ids for per-document attention, or null
  const int32_t* targets = nullptr;      // label ids, -100 where no loss
  const float* weights = nullptr;        // per-token loss weights, or null for 1
  BatchInfo info() const { return BatchInfo{B, T, positions, segment_ids}; }
};

class LanguageModel {
 public:
  LanguageModel(const TransformerConfig& cfg, const LayerSpec& spec, const ParallelContext& ctx,
                bool pre_process = true, bool post_process = true);

  const TransformerConfig& config() const { return cfg_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  Arena& arena() { return arena_; }

  // Forward and backward of one micro-batch; returns sum_n w_n CE_n. Gradients are accumulated into
  // params().grads() with dlogits multiplied by grad_scale. The arena is reset at the end.
  double forward_backward(const MicroBatch& mb, float grad_scale, float* per_token_loss = nullptr);
  // Forward only: the same loss, no gradients.
  double forward_loss(const MicroBatch& mb, float* per_token_loss = nullptr);
  // Forward to logits [B*T, V] in the arena (valid until arena().reset()).
  Tensor forward_logits(const MicroBatch& mb);
  // Inference with a KV cache (nn/kv_cache.h): the mb.T new tokens of each of the mb.B sequences go
  // to cache rows offsets[b] .. offsets[b]+T of cache sequences first_seq .. first_seq+B; their
  // queries attend causally or to every written row [0, offsets[b]+T). Returns logits [B*T, V], or
  // [B, V] of each sequence's last new row when last_only (arena; valid until arena().reset()).
  Tensor forward_logits_cached(const MicroBatch& mb, KVCache& cache, int64_t first_seq, const int64_t* offsets,
                               bool causal, bool last_only);
  // Makes `cache` hold `batch` sequences of `capacity` rows for this model.
  void allocate_cache(KVCache& cache, int64_t batch, int64_t capacity) const;
  // The MoE blocks of the layers that have one, in layer order (empty for a dense model).
  std::vector<MoELayer*> moe_layers();

 private:
  Tensor forward_hidden(const MicroBatch& mb);  // through the final norm

  TransformerConfig cfg_;
  ParallelContext ctx_;
  ParamStore params_;
  Arena arena_;
  bool pre_process_, post_process_;
  Embedding embedding_;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  Norm final_norm_;
  LMHead head_;
};

// Checks that the sizes are consistent (heads divide hidden, groups divide heads, ...), with an Error
// naming the flag at fault.
void validate_config(const TransformerConfig& cfg);
int64_t parameter_count(const TransformerConfig& cfg);

}  // namespace megadlm
