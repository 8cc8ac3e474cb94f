#pragma once
// The numbers and switches that define a decoder transformer (Megatron's TransformerConfig), and the
// per-batch geometry that modules need besides their input.
#include <cstdint>

#include "kernels/types.h"
#include "nn/moe/moe_config.h"
#include "nn/norm.h"

namespace megadlm {

enum class PositionEmbedding : uint8_t { LearnedAbsolute, Rope, None };

struct TransformerConfig {
  int64_t num_layers = 2;
  int64_t hidden_size = 64;           // C
  int64_t num_attention_heads = 4;    // H
  int64_t num_query_groups = 4;       // K (== H without GQA)
  int64_t kv_channels = 16;           // D
  int64_t ffn_hidden_size = 256;      // F
  int64_t vocab_size = 256;           // V, padded to --make-vocab-size-divisible-by
  // The tokens among the V rows: rows [real_vocab_size, V) are padding, and their logits are -inf, kept
  // out of every softmax (training, evaluation, sampling). 0: every row is a token (no padding).
  int64_t real_vocab_size = 0;
  int64_t max_position_embeddings = 128;
  NormKind normalization = NormKind::LayerNorm;
  float norm_epsilon = 1e-5f;
  Activation activation = Activation::Gelu;
  bool add_bias_linear = true;
  bool add_qkv_bias = false;          // Qwen2: biases on q/k/v even without other biases
  PositionEmbedding position_embedding = PositionEmbedding::LearnedAbsolute;
  double rotary_base = 10000.0;
  bool qk_layernorm = false;
  bool untie_embeddings_and_output_weights = false;
  float init_method_std = 0.02f;
  MaskType attention_mask = MaskType::Causal;
  int64_t attention_block_size = 0;   // block_causal
  // Trained as a block diffusion model (BD3-LM, objectives/block_diffusion.h) with blocks of
  // attention_block_size: the mask stays block_causal, which is what a block sees when it is sampled.
  bool block_diffusion = false;
  MoEConfig moe;                      // num_experts > 0: MoE in the layers moe.is_moe_layer() picks
};

// What modules need to know about the batch besides their input tensor.
struct BatchInfo {
  int64_t B = 0, T = 0;
  const int32_t* positions = nullptr;    // [B*T] position ids (RoPE / learned positions)
  const int32_t* segment_ids = nullptr;  // [B*T] document ids for per-document masks, or null
  // Context parallelism (nn/ring_attention.h): B, T, positions and segment_ids are this rank's two
  // chunks of each sequence; the whole sequences' document ids [B, T*cp] (host), or null, give the
  // keys' ids of the other ranks' chunks.
  const int32_t* sequence_segment_ids = nullptr;
  // Encoder-decoder models: the other stack's output that cross-attention reads, memory [B*S, C] (S
  // rows a sequence), and memory_grad [B*S, C] where the backward accumulates its gradient (+=, so
  // several cross-attention layers add theirs). Null in a decoder-only model.
  const float* memory = nullptr;
  float* memory_grad = nullptr;
  int64_t memory_T = 0;  // S
  // The micro-batch's share of the step (MicroBatch::weight): the gradient scale of the losses a
  // module adds on its own (the MoE aux and z losses), as the objective scales the LM loss.
  float weight = 1.0f;
  // Block diffusion's 2T training layout (MicroBatch::block_diffusion): self-attention's mask is
  // MaskType::BlockDiffusion with blocks of this length. 0: the layer's own mask.
  int64_t block_diffusion = 0;
};

}  // namespace megadlm
