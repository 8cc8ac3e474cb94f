#include "models/config_json.h"

#include "core/error.h"
#include "models/moe_config_json.h"

namespace megadlm {

static const char* mask_name(MaskType m) {
  switch (m) {
    case MaskType::None: return "no_mask";
    case MaskType::Causal: return "causal";
    case MaskType::BlockCausal: return "block_causal";
    case MaskType::BlockDiffusion: break;  // a training layout's mask, never a model's (block_diffusion)
  }
  return "?";
}

nlohmann::json config_to_json(const TransformerConfig& c) {
  nlohmann::json j;
  j["num_layers"] = c.num_layers;
  j["hidden_size"] = c.hidden_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_query_groups"] = c.num_query_groups;
  j["kv_channels"] = c.kv_channels;
  j["ffn_hidden_size"] = c.ffn_hidden_size;
  j["vocab_size"] = c.vocab_size;
  if (c.real_vocab_size > 0 && c.real_vocab_size < c.vocab_size) j["real_vocab_size"] = c.real_vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["normalization"] = c.normalization == NormKind::LayerNorm ? "LayerNorm" : "RMSNorm";
  j["norm_epsilon"] = c.norm_epsilon;
  j["swiglu"] = c.activation == Activation::SwiGLU;
  j["add_bias_linear"] = c.add_bias_linear;
  j["add_qkv_bias"] = c.add_qkv_bias;
  j["position_embedding_type"] = c.position_embedding == PositionEmbedding::Rope ? "rope"
                                 : c.position_embedding == PositionEmbedding::LearnedAbsolute ? "learned_absolute"
                                                                                              : "none";
  j["rotary_base"] = c.rotary_base;
  j["qk_layernorm"] = c.qk_layernorm;
  j["untie_embeddings_and_output_weights"] = c.untie_embeddings_and_output_weights;
  j["init_method_std"] = c.init_method_std;
  j["attention_mask_type"] = mask_name(c.attention_mask);
  j["attention_block_size"] = c.attention_block_size;
  if (c.block_diffusion) j["block_diffusion"] = true;  // BD3-LM: blocks of attention_block_size
  if (c.moe.enabled()) j["moe"] = moe_config_to_json(c.moe);
  return j;
}

template <typename T>
static T field(const nlohmann::json& j, const char* key, const std::string& where) {
  MEGADLM_CHECK(j.is_object() && j.contains(key), where, ": model config lacks '", key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(where, ": model config field '", key, "' has the wrong type");
  }
}

TransformerConfig config_from_json(const nlohmann::json& j, const std::string& where) {
  TransformerConfig c;
  c.num_layers = field<int64_t>(j, "num_layers", where);
  c.hidden_size = field<int64_t>(j, "hidden_size", where);
  c.num_attention_heads = field<int64_t>(j, "num_attention_heads", where);
  c.num_query_groups = field<int64_t>(j, "num_query_groups", where);
  c.kv_channels = field<int64_t>(j, "kv_channels", where);
  c.ffn_hidden_size = field<int64_t>(j, "ffn_hidden_size", where);
  c.vocab_size = field<int64_t>(j, "vocab_size", where);
  c.real_vocab_size = j.contains("real_vocab_size") ? field<int64_t>(j, "real_vocab_size", where) : 0;
  MEGADLM_CHECK(c.real_vocab_size >= 0 && c.real_vocab_size <= c.vocab_size, where, ": model config field 'real_vocab_size' ",
                c.real_vocab_size, " is outside [0, vocab_size ", c.vocab_size, "]");
  c.max_position_embeddings = field<int64_t>(j, "max_position_embeddings", where);
  c.normalization = norm_kind_from_name(field<std::string>(j, "normalization", where));
  c.norm_epsilon = field<float>(j, "norm_epsilon", where);
  c.activation = field<bool>(j, "swiglu", where) ? Activation::SwiGLU : Activation::Gelu;
  c.add_bias_linear = field<bool>(j, "add_bias_linear", where);
  c.add_qkv_bias = j.value("add_qkv_bias", false);
  const std::string pos = field<std::string>(j, "position_embedding_type", where);
  if (pos == "rope") c.position_embedding = PositionEmbedding::Rope;
  else if (pos == "learned_absolute") c.position_embedding = PositionEmbedding::LearnedAbsolute;
  else if (pos == "none") c.position_embedding = PositionEmbedding::None;
  else fail(where, ": unknown position_embedding_type '", pos, "'");
  c.rotary_base = j.value("rotary_base", 10000.0);
  c.qk_layernorm = j.value("qk_layernorm", false);
  c.untie_embeddings_and_output_weights = field<bool>(j, "untie_embeddings_and_output_weights", where);
  c.init_method_std = j.value("init_method_std", 0.02f);
  const std::string mask = j.value("attention_mask_type", std::string("causal"));
  if (mask == "no_mask") c.attention_mask = MaskType::None;
  else if (mask == "causal") c.attention_mask = MaskType::Causal;
  else if (mask == "block_causal") c.attention_mask = MaskType::BlockCausal;
  else fail(where, ": unknown attention_mask_type '", mask, "'");
  c.attention_block_size = j.value("attention_block_size", int64_t{0});
  c.block_diffusion = j.contains("block_diffusion") && field<bool>(j, "block_diffusion", where);
  MEGADLM_CHECK(!c.block_diffusion || (c.attention_mask == MaskType::BlockCausal && c.attention_block_size > 0), where,
                ": a block diffusion model config needs attention_mask_type block_causal and attention_block_size > 0");
  if (j.contains("moe")) c.moe = moe_config_from_json(j["moe"], where);
  return c;
}

}  // namespace megadlm
