#pragma once
// The specs of the building blocks, as Megatron-core's ModuleSpec names a module's submodules: what a
// transformer layer is made of (the norm and where it sits, the self-attention and its mask, an optional
// cross-attention, the feed-forward block, dense MLP or MoE, and its activation), a stack of layers, the
// embeddings in front of a stack and the heads after it. The sizes come from TransformerConfig; a spec
// says which modules. Model families write specs (models/); the modules only follow them, so a new
// family adds a spec and, where it needs one, a module, never a branch in the modules it shares.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "nn/host_activation.h"
#include "nn/transformer_config.h"

namespace megadlm {

// Where a residual branch's norm sits. Pre: y = x + f(norm(x)) (GPT-2, LLaMA, T5). Post: y = norm(x +
// f(x)) (the original transformer and BERT).
enum class NormPlacement : uint8_t { Pre, Post };

// LayerNorm (weight and bias) or RMSNorm (weight only). T5's "LayerNorm" is RMSNorm: x * rsqrt(mean(x^2)
// + eps) * weight, no mean subtracted, no bias.
struct NormSpec {
  NormKind kind = NormKind::LayerNorm;
  NormPlacement placement = NormPlacement::Pre;
};

struct SelfAttentionSpec {
  MaskType mask = MaskType::Causal;
  int64_t block_size = 0;  // BlockCausal
  bool qk_norm = false;    // per-head RMSNorm of q and k (Qwen3)
};

// Queries from the layer's input, keys and values from another stack's output (the encoder's, in an
// encoder-decoder model), every key visible: T5's decoder.
struct CrossAttentionSpec {};

enum class FeedForwardKind : uint8_t { Dense, MoE };

struct FeedForwardSpec {
  FeedForwardKind kind = FeedForwardKind::Dense;
  Activation activation = Activation::Gelu;
  // An activation of host loops instead of `activation` (nn/host_activation.h): GELU with the erf
  // (BERT's "gelu"), CLIP's quick GELU; dense, fp32, CPU. None: `activation` through the Backend.
  HostActivation host_activation = HostActivation::None;
};

// One layer: [norm, self-attention], [norm, cross-attention] when given, [norm, feed-forward], each a
// residual branch with the norm placed as `norm.placement` says.
struct LayerSpec {
  NormSpec norm;
  SelfAttentionSpec self_attention;
  std::optional<CrossAttentionSpec> cross_attention;
  FeedForwardSpec mlp;
};

// A stack of layers (Megatron's TransformerBlock): its parameters are named `prefix`.N..., with N the
// layer's index in the stack; layer(N) gives each layer's spec (MoE on the layers --moe-layer-freq
// picks, say). final_norm: the stack ends in a norm of its own (`final_norm_name`), as pre-norm stacks
// do; a post-norm stack's output is already normalised.
struct StackSpec {
  std::string prefix = "layers";
  int64_t num_layers = 0;
  std::function<LayerSpec(int64_t layer)> layer;
  bool final_norm = true;
  std::string final_norm_name = "norm";
  NormKind final_norm_kind = NormKind::LayerNorm;
};

// What turns the input ids into the first stack's input: the token embedding always (vocab-parallel);
// a learned absolute position table (GPT-2, BERT; RoPE lives in the attention instead); BERT's
// token-type table of token_types rows; BERT's LayerNorm of the sum (layernorm); image patches
// projected into the sequence (a vision transformer: PatchEmbedding, nn/patch_embedding.h, which
// ClipVisionModel builds; Embedding refuses them by name).
struct EmbeddingSpec {
  bool learned_positions = true;
  int64_t token_types = 0;
  bool patches = false;
  bool layernorm = false;
};

// What follows the last stack: the LM head (logits over the vocabulary and the fused cross-entropy,
// the output matrix tied to the word embeddings or not), BERT's MLM head (dense, GELU, LayerNorm, then
// the tied decoder with an output bias), BERT's pooler (dense + tanh of the first token) with the
// binary next-sentence head. LanguageModel builds the LM head; BertModel (models/bert_model.h) the
// other two (nn/bert_heads.h).
enum class HeadKind : uint8_t { LM, MLM, PoolerBinary };

struct HeadSpec {
  HeadKind kind = HeadKind::LM;
  bool tied = true;  // the output matrix is the word embeddings
};

}  // namespace megadlm
