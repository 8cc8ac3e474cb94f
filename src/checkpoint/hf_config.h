#pragma once
// HuggingFace config.json <-> our TransformerConfig, per layout: GPT-2, LLaMA, Qwen2, Qwen3, LLaDA,
// Mixtral and Qwen3-MoE (the tensors of each layout: hf_tensor_map.h).
// MoE routing: softmax, top-k, renormalised over the k (Mixtral; Qwen3-MoE with norm_topk_prob) is
// our pre_softmax = false; Qwen3-MoE without norm_topk_prob is pre_softmax = true.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "nn/transformer_config.h"

namespace megadlm {

enum class HfLayout : uint8_t { GPT2, Llama, Qwen2, Qwen3, LLaDA, Mixtral, Qwen3Moe };
const char* hf_layout_name(HfLayout l);              // "gpt2", "llama", "qwen2", "qwen3", "llada", "mixtral", "qwen3_moe"
HfLayout hf_layout_from_name(const std::string& s);  // Error listing the names
const char* hf_architecture_name(HfLayout l);        // "GPT2LMHeadModel", ...

// What config.json says besides the TransformerConfig.
struct HfModelInfo {
  HfLayout layout = HfLayout::Llama;
  TransformerConfig config;   // attention_mask: Causal, or None for a bidirectional (diffusion) model
  bool diffusion = false;     // LLaDA, or a model exported by us with bidirectional attention
  int32_t mask_token_id = -1;
  int32_t bos_token_id = -1, eos_token_id = -1;
};

// Maps config.json to our config. Unsupported settings (rope scaling, an active sliding window,
// activations other than the layout's, ...) are Errors naming `where` and the field.
HfModelInfo hf_config_to_info(const nlohmann::json& cfg, const std::string& where);
// The config.json of a model of ours in `layout`. Errors name what the layout cannot express.
nlohmann::json hf_config_from_info(const HfModelInfo& info, DType dtype);
// The layout a model of ours exports to by default: gpt2 for LayerNorm + learned positions, qwen3
// with QK-norm, qwen2 with QKV biases, else llama.
HfLayout default_hf_layout(const TransformerConfig& cfg);

}  // namespace megadlm
