#pragma once
// HuggingFace checkpoints <-> our parameters. A HuggingFace directory holds config.json, the weights
// (model.safetensors, or shards + model.safetensors.index.json) and tokenizer files. Supported layouts:
//   gpt2   GPT2LMHeadModel     transformer.wte/wpe, h.N.ln_1/ln_2, attn.c_attn (fused QKV) / c_proj,
//                              mlp.c_fc / c_proj as Conv1D ([in, out]: transposed), ln_f; tied head
//   llama  LlamaForCausalLM    model.embed_tokens, model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
//                              post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head
//   qwen2  Qwen2ForCausalLM    llama + q/k/v biases (our add_qkv_bias)
//   qwen3  Qwen3ForCausalLM    llama + self_attn.{q,k}_norm (our qk_layernorm), head_dim free (kv_channels)
//   llada  LLaDAModelLM        model.transformer.{wte, ln_f, ff_out}, blocks.N.{attn_norm, q_proj, k_proj,
//                              v_proj, attn_out, ff_norm, ff_proj (gate), up_proj, ff_out}
//   mixtral    MixtralForCausalLM   llama + block_sparse_moe.{gate, experts.E.{w1 (gate), w3 (up), w2 (down)}}
//   qwen3_moe  Qwen3MoeForCausalLM  qwen3 + mlp.{gate, experts.E.{gate,up,down}_proj} (mlp_only_layers dense)
// MoE routing: softmax, top-k, renormalised over the k (Mixtral; Qwen3-MoE with norm_topk_prob) is
// our pre_softmax = false; Qwen3-MoE without norm_topk_prob is pre_softmax = true.
// Our fc1 holds [gate; up] rows; fc2 is down_proj. Every tensor of ours is a concatenation of row
// ranges of (possibly transposed) HF tensors, so import and export are exact inverses: a round trip
// reproduces every HF tensor bit for bit in F32, and in BF16 / F16 too (those widen to F32 exactly).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "models/language_model.h"

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

struct HfCheckpoint {
  HfModelInfo info;
  DType dtype = DType::F32;               // dtype most source tensors were stored in
  std::vector<SafetensorsEntry> params;   // our names, F32 owned tensors, in our registration order
  nlohmann::json raw_config;              // config.json as read
};

// Reads config.json and the weights of `dir` and maps them to our names and shapes. Every parameter
// the config implies must be present, and every tensor in the files must be used (or be a known
// buffer), else an Error naming the tensor.
HfCheckpoint read_hf_checkpoint(const std::string& dir);

// Copies `params` into `model` by name; every model parameter must be given with its shape and no
// name may be left over (Error naming `where` and the tensor).
void load_params_into(const std::vector<SafetensorsEntry>& params, LanguageModel& model, const std::string& where);

// The parameters of a model as F32 views (valid while the model lives), in registration order.
std::vector<SafetensorsEntry> model_params(const LanguageModel& model);

// Our parameters -> HF tensors in `info.layout`, converted to dtype (F32, BF16 or F16).
std::vector<SafetensorsEntry> params_to_hf(const std::vector<SafetensorsEntry>& params, const HfModelInfo& info,
                                           DType dtype);

struct HfWriteOptions {
  DType dtype = DType::F32;
  int64_t max_shard_bytes = 0;  // <= 0: one file
};
// Writes config.json and weights (atomic files) into dir.
void write_hf_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params, const HfModelInfo& info,
                         const HfWriteOptions& opt);

// Tokenizer files carried between HF directories and native checkpoints.
extern const char* const kHfTokenizerFiles[];  // null-terminated list: tokenizer.json, tokenizer_config.json, ...

}  // namespace megadlm
