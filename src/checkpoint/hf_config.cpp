// HuggingFace config.json <-> TransformerConfig: the layout names, the import (hf_config_to_info)
// and the export (hf_config_from_info).
#include "checkpoint/hf_config.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "checkpoint/hf_json.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace megadlm {

const char* hf_layout_name(HfLayout l) {
  switch (l) {
    case HfLayout::GPT2: return "gpt2";
    case HfLayout::Llama: return "llama";
    case HfLayout::Qwen2: return "qwen2";
    case HfLayout::Qwen3: return "qwen3";
    case HfLayout::LLaDA: return "llada";
    case HfLayout::Mixtral: return "mixtral";
    case HfLayout::Qwen3Moe: return "qwen3_moe";
  }
  return "?";
}

const char* hf_architecture_name(HfLayout l) {
  switch (l) {
    case HfLayout::GPT2: return "GPT2LMHeadModel";
    case HfLayout::Llama: return "LlamaForCausalLM";
    case HfLayout::Qwen2: return "Qwen2ForCausalLM";
    case HfLayout::Qwen3: return "Qwen3ForCausalLM";
    case HfLayout::LLaDA: return "LLaDAModelLM";
    case HfLayout::Mixtral: return "MixtralForCausalLM";
    case HfLayout::Qwen3Moe: return "Qwen3MoeForCausalLM";
  }
  return "?";
}

HfLayout hf_layout_from_name(const std::string& s) {
  for (HfLayout l : {HfLayout::GPT2, HfLayout::Llama, HfLayout::Qwen2, HfLayout::Qwen3, HfLayout::LLaDA,
                     HfLayout::Mixtral, HfLayout::Qwen3Moe})
    if (s == hf_layout_name(l)) return l;
  fail("unknown HuggingFace layout '", s, "' (gpt2, llama, qwen2, qwen3, llada, mixtral, qwen3_moe)");
}

HfLayout default_hf_layout(const TransformerConfig& c) {
  if (c.moe.enabled()) return c.qk_layernorm ? HfLayout::Qwen3Moe : HfLayout::Mixtral;
  if (c.position_embedding == PositionEmbedding::LearnedAbsolute && c.normalization == NormKind::LayerNorm) return HfLayout::GPT2;
  if (c.qk_layernorm) return HfLayout::Qwen3;
  if (c.add_qkv_bias && !c.add_bias_linear) return HfLayout::Qwen2;
  return HfLayout::Llama;
}

namespace {

using nlohmann::json;

template <typename T>
T req(const json& j, const char* key, const std::string& where) {
  MEGADLM_CHECK(j.contains(key) && !j[key].is_null(), where, ": config.json lacks '", key, "'");
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail(where, ": config.json field '", key, "' has the wrong type (", j[key].dump(), ")");
  }
}

template <typename T>
T opt(const json& j, const char* key, T dflt, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail(where, ": config.json field '", key, "' has the wrong type (", j[key].dump(), ")");
  }
}

// A size field (heads, layers, widths, vocabulary, experts): the conversion divides by it or sizes
// tensors with it, so it must be at least `min`.
int64_t at_least(int64_t v, int64_t min, const char* key, const std::string& where) {
  MEGADLM_CHECK(v >= min, where, ": config.json field '", key, "' must be at least ", min, ", got ", v);
  return v;
}

int64_t req_size(const json& j, const char* key, const std::string& where, int64_t min = 1) {
  return at_least(req<int64_t>(j, key, where), min, key, where);
}

int64_t opt_size(const json& j, const char* key, int64_t dflt, const std::string& where, int64_t min = 1) {
  return at_least(opt<int64_t>(j, key, dflt, where), min, key, where);
}

// A real field that must be finite and above zero (epsilons, RoPE base, init std).
double positive(double v, const char* key, const std::string& where) {
  MEGADLM_CHECK(std::isfinite(v) && v > 0, where, ": config.json field '", key, "' must be a positive number, got ", v);
  return v;
}

// hidden / heads is the head dimension where config.json has no head_dim: it must divide exactly.
void require_divisible(int64_t hidden, const char* hidden_key, int64_t heads, const char* heads_key,
                       const std::string& where) {
  MEGADLM_CHECK(hidden % heads == 0, where, ": config.json ", hidden_key, " ", hidden, " is not a multiple of ",
                heads_key, " ", heads);
}

int32_t token_id(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer()) return -1;  // null, absent, or a list (several eos)
  return j[key].get<int32_t>();
}

// rope_theta at the top level (transformers 4) or inside rope_parameters (transformers 5); any
// scaling is refused because our RoPE tables are the plain ones.
double rope_theta(const json& j, const std::string& where) {
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& s = j["rope_scaling"];
    const std::string type = s.is_object() ? s.value("rope_type", s.value("type", std::string("?"))) : "?";
    MEGADLM_CHECK(type == "default", where, ": config.json sets rope_scaling (", s.dump(),
                  "); only plain RoPE is supported");
  }
  double theta = opt<double>(j, "rope_theta", 10000.0, where);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& p = j["rope_parameters"];
    const std::string type = p.value("rope_type", std::string("default"));
    MEGADLM_CHECK(type == "default", where, ": config.json rope_parameters.rope_type is '", type,
                  "'; only plain RoPE (default) is supported");
    if (p.contains("rope_theta")) theta = p["rope_theta"].get<double>();
    MEGADLM_CHECK(!p.contains("partial_rotary_factor") || p["partial_rotary_factor"].get<double>() == 1.0, where,
                  ": config.json rope_parameters.partial_rotary_factor is not 1 (partial RoPE is not supported)");
  }
  MEGADLM_CHECK(opt<double>(j, "partial_rotary_factor", 1.0, where) == 1.0, where,
                ": config.json partial_rotary_factor is not 1 (partial RoPE is not supported)");
  return positive(theta, "rope_theta", where);
}

// Mixtral: num_local_experts, num_experts_per_tok, intermediate_size per expert; softmax, top-k,
// renormalised. Qwen3-MoE: num_experts (transformers 4) or num_local_experts (5), moe_intermediate_size
// per expert, intermediate_size for the dense mlp_only_layers, norm_topk_prob, decoder_sparse_step
// (layer i sparse when (i + 1) % step == 0 and i not in mlp_only_layers).
void read_moe_fields(const json& j, HfLayout layout, TransformerConfig& c, const std::string& where) {
  MoEConfig& m = c.moe;
  m.num_experts = j.contains("num_local_experts") && !j["num_local_experts"].is_null()
                      ? req_size(j, "num_local_experts", where)
                      : req_size(j, "num_experts", where);
  m.topk = req_size(j, "num_experts_per_tok", where);
  MEGADLM_CHECK(m.topk <= m.num_experts, where, ": config.json num_experts_per_tok ", m.topk, " exceeds the ",
                m.num_experts, " experts");
  m.router_type = MoERouterType::TopK;
  m.score_function = MoEScoreFunction::Softmax;
  m.load_balancing = MoELoadBalancing::AuxLoss;
  m.aux_loss_coeff = static_cast<float>(opt<double>(j, "router_aux_loss_coef", 0.0, where));
  m.capacity_factor = 0.0;
  m.shared_expert_size = 0;
  MEGADLM_CHECK(!j.contains("shared_expert_intermediate_size") || j["shared_expert_intermediate_size"].is_null() ||
                 j["shared_expert_intermediate_size"].get<int64_t>() == 0,
                where, ": shared experts are not supported in this layout");
  if (layout == HfLayout::Mixtral) {
    m.pre_softmax = false;
    m.ffn_hidden_size = c.ffn_hidden_size;
    m.layer_freq = 1;
    return;
  }
  m.pre_softmax = !opt<bool>(j, "norm_topk_prob", false, where);
  m.ffn_hidden_size = req_size(j, "moe_intermediate_size", where);
}

// Qwen3-MoE's per-layer pattern; built after the size bound, as it takes a byte per layer.
void read_moe_layer_pattern(const json& j, TransformerConfig& c, const std::string& where) {
  MoEConfig& m = c.moe;
  const int64_t step = opt<int64_t>(j, "decoder_sparse_step", 1, where);
  MEGADLM_CHECK(step >= 1, where, ": decoder_sparse_step must be at least 1, got ", step);
  std::vector<int64_t> dense_layers;
  if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array())
    dense_layers = opt<std::vector<int64_t>>(j, "mlp_only_layers", {}, where);
  m.layer_pattern.assign(static_cast<size_t>(c.num_layers), 0);
  for (int64_t l = 0; l < c.num_layers; ++l) m.layer_pattern[static_cast<size_t>(l)] = (l + 1) % step == 0 ? 1 : 0;
  for (int64_t d : dense_layers)
    if (d >= 0 && d < c.num_layers) m.layer_pattern[static_cast<size_t>(d)] = 0;
}

// An upper bound of the parameter count in floating point (every layer counted as MoE when the
// model has experts), so that sizes whose exact count would overflow int64 are still measured.
double parameter_bound(const TransformerConfig& c) {
  const double C = static_cast<double>(c.hidden_size), D = static_cast<double>(c.kv_channels);
  const double H = static_cast<double>(c.num_attention_heads), K = static_cast<double>(c.num_query_groups);
  const double gated = c.activation == Activation::SwiGLU ? 3.0 : 2.0;
  double ffn = gated * C * static_cast<double>(c.ffn_hidden_size);
  if (c.moe.enabled()) {
    const double E = static_cast<double>(c.moe.num_experts);
    ffn = std::max(ffn, E * gated * C * static_cast<double>(c.moe.ffn_hidden_size) + E * C);
  }
  const double per_layer = C * (H + 2 * K) * D + H * D * C + ffn + 4 * C + 2 * D;
  double total = static_cast<double>(c.num_layers) * per_layer + 2 * static_cast<double>(c.vocab_size) * C + 2 * C;
  if (c.position_embedding == PositionEmbedding::LearnedAbsolute)
    total += static_cast<double>(c.max_position_embeddings) * C;
  return total;
}

// Refuses, before anything is sized from it, a config.json whose weights alone (one F32 copy) do not
// fit in the host's available memory; importing needs that much at least, training four times as
// much and activations (the trainer's estimate checks that later).
void refuse_a_model_beyond_memory(const TransformerConfig& c, const std::string& where) {
  const double params = parameter_bound(c);
  const double bytes = 4.0 * params;
  const double avail = available_host_memory_bytes();
  const bool countable = params < 0x1p53;  // exact in int64 and double: the later counts cannot overflow
  MEGADLM_CHECK(countable && (avail <= 0 || bytes < 0.9 * avail), where, ": the model does not fit in memory: ",
                "config.json describes about ", params, " parameters (", bytes / (1 << 30), " GiB as F32, before ",
                "gradients and optimizer state) but ", avail / (1 << 30), " GiB is available (num_hidden_layers / ",
                "n_layers, hidden and intermediate sizes, vocab_size and the number of experts size it)");
}

void read_diffusion_fields(const json& j, HfModelInfo& info) {
  info.mask_token_id = token_id(j, "mask_token_id");
  const bool bidirectional = j.contains("is_causal") && j["is_causal"].is_boolean() && !j["is_causal"].get<bool>();
  if (bidirectional) {
    info.diffusion = true;
    info.config.attention_mask = MaskType::None;
  }
}

}  // namespace

HfModelInfo hf_config_to_info(const json& j, const std::string& where) {
  MEGADLM_CHECK(j.is_object(), where, ": config.json is not a JSON object");
  HfModelInfo info;
  TransformerConfig& c = info.config;
  const std::string model_type = opt<std::string>(j, "model_type", "", where);
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    arch = j["architectures"][0].get<std::string>();
  if (model_type == "gpt2" || arch == "GPT2LMHeadModel") info.layout = HfLayout::GPT2;
  else if (model_type == "llama" || arch == "LlamaForCausalLM") info.layout = HfLayout::Llama;
  else if (model_type == "qwen2" || arch == "Qwen2ForCausalLM") info.layout = HfLayout::Qwen2;
  else if (model_type == "qwen3" || arch == "Qwen3ForCausalLM") info.layout = HfLayout::Qwen3;
  else if (model_type == "llada" || arch == "LLaDAModelLM") info.layout = HfLayout::LLaDA;
  else if (model_type == "mixtral" || arch == "MixtralForCausalLM") info.layout = HfLayout::Mixtral;
  else if (model_type == "qwen3_moe" || arch == "Qwen3MoeForCausalLM") info.layout = HfLayout::Qwen3Moe;
  else if (model_type == "bert" || arch.rfind("Bert", 0) == 0)
    fail(where, ": a BERT model (", arch, "): convert_checkpoint converts it (layout bert) to a --model-type bert ",
         "checkpoint; the gpt and difflm paths (--load-hf, generate) do not take it");
  else if (model_type == "t5" || arch.rfind("T5", 0) == 0)
    fail(where, ": a T5 model (", arch, "): convert_checkpoint converts it (layout t5) to a t5 checkpoint; the ",
         "gpt and difflm paths (--load-hf, generate) do not take it");
  else if (model_type == "llava" || arch == "LlavaForConditionalGeneration")
    fail(where, ": a LLaVA model (", arch, "): convert_checkpoint converts it (layout llava) to a llava checkpoint; ",
         "the gpt and difflm paths (--load-hf) do not take it");
  else if (model_type == "clip_vision_model" || model_type == "clip" || arch.rfind("CLIP", 0) == 0)
    fail(where, ": a CLIP model (", arch, "): convert_checkpoint converts its vision tower (layout clip_vision); the ",
         "gpt and difflm paths (--load-hf, generate) do not take it");
  else fail(where, ": unsupported model (model_type '", model_type, "', architecture '", arch,
            "'); supported: gpt2, llama, qwen2, qwen3, llada, mixtral, qwen3_moe");
  info.bos_token_id = token_id(j, "bos_token_id");
  info.eos_token_id = token_id(j, "eos_token_id");
  c.init_method_std =
      static_cast<float>(positive(opt<double>(j, "initializer_range", 0.02, where), "initializer_range", where));
  c.attention_mask = MaskType::Causal;

  if (info.layout == HfLayout::GPT2) {
    c.num_layers = req_size(j, "n_layer", where);
    c.hidden_size = req_size(j, "n_embd", where);
    c.num_attention_heads = req_size(j, "n_head", where);
    require_divisible(c.hidden_size, "n_embd", c.num_attention_heads, "n_head", where);
    c.num_query_groups = c.num_attention_heads;
    c.kv_channels = c.hidden_size / c.num_attention_heads;
    c.ffn_hidden_size = opt_size(j, "n_inner", 4 * c.hidden_size, where);
    c.vocab_size = req_size(j, "vocab_size", where, 2);
    c.max_position_embeddings = req_size(j, "n_positions", where);
    c.normalization = NormKind::LayerNorm;
    c.norm_epsilon =
        static_cast<float>(positive(opt<double>(j, "layer_norm_epsilon", 1e-5, where), "layer_norm_epsilon", where));
    const std::string act = opt<std::string>(j, "activation_function", "gelu_new", where);
    MEGADLM_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", where, ": activation_function '", act,
                  "' is not supported (only the tanh GELU: gelu_new, gelu_pytorch_tanh)");
    c.activation = Activation::Gelu;
    c.add_bias_linear = true;
    c.position_embedding = PositionEmbedding::LearnedAbsolute;
    MEGADLM_CHECK(!opt<bool>(j, "scale_attn_by_inverse_layer_idx", false, where), where,
                  ": scale_attn_by_inverse_layer_idx is not supported");
    MEGADLM_CHECK(opt<bool>(j, "scale_attn_weights", true, where), where, ": scale_attn_weights false is not supported");
    c.untie_embeddings_and_output_weights = !opt<bool>(j, "tie_word_embeddings", true, where);
  } else if (info.layout == HfLayout::LLaDA) {
    c.num_layers = req_size(j, "n_layers", where);
    c.hidden_size = req_size(j, "d_model", where);
    c.num_attention_heads = req_size(j, "n_heads", where);
    c.num_query_groups = opt_size(j, "n_kv_heads", c.num_attention_heads, where);
    require_divisible(c.hidden_size, "d_model", c.num_attention_heads, "n_heads", where);
    c.kv_channels = c.hidden_size / c.num_attention_heads;
    c.ffn_hidden_size = req_size(j, "mlp_hidden_size", where);
    c.vocab_size = j.contains("embedding_size") && !j["embedding_size"].is_null()
                       ? req_size(j, "embedding_size", where, 2)
                       : req_size(j, "vocab_size", where, 2);
    c.max_position_embeddings = req_size(j, "max_sequence_length", where);
    c.normalization = NormKind::RMSNorm;
    c.norm_epsilon = static_cast<float>(positive(opt<double>(j, "rms_norm_eps", 1e-5, where), "rms_norm_eps", where));
    const std::string norm = opt<std::string>(j, "layer_norm_type", "rms", where);
    MEGADLM_CHECK(norm == "rms", where, ": layer_norm_type '", norm, "' is not supported (only rms)");
    const std::string act = opt<std::string>(j, "activation_type", "silu", where);
    MEGADLM_CHECK(act == "silu" || act == "swiglu", where, ": activation_type '", act, "' is not supported (only silu)");
    const std::string block = opt<std::string>(j, "block_type", "llama", where);
    MEGADLM_CHECK(block == "llama", where, ": block_type '", block, "' is not supported (only llama)");
    MEGADLM_CHECK(opt<bool>(j, "rope", true, where), where, ": rope false is not supported");
    MEGADLM_CHECK(!opt<bool>(j, "alibi", false, where), where, ": alibi is not supported");
    MEGADLM_CHECK(!opt<bool>(j, "attention_layer_norm", false, where), where, ": attention_layer_norm is not supported");
    MEGADLM_CHECK(!opt<bool>(j, "bias_for_layer_norm", false, where), where, ": bias_for_layer_norm is not supported");
    MEGADLM_CHECK(!opt<bool>(j, "input_emb_norm", false, where), where, ": input_emb_norm is not supported");
    MEGADLM_CHECK(!j.contains("clip_qkv") || j["clip_qkv"].is_null(), where, ": clip_qkv is not supported");
    MEGADLM_CHECK(!j.contains("scale_logits") || !j["scale_logits"].get<bool>(), where, ": scale_logits is not supported");
    c.activation = Activation::SwiGLU;
    c.add_bias_linear = opt<bool>(j, "include_bias", false, where);
    c.add_qkv_bias = opt<bool>(j, "include_qkv_bias", false, where);
    c.position_embedding = PositionEmbedding::Rope;
    c.rotary_base = positive(opt<double>(j, "rope_theta", 10000.0, where), "rope_theta", where);
    c.untie_embeddings_and_output_weights = !opt<bool>(j, "weight_tying", false, where);
    info.diffusion = true;
    c.attention_mask = MaskType::None;
    info.mask_token_id = token_id(j, "mask_token_id");
  } else {
    c.num_layers = req_size(j, "num_hidden_layers", where);
    c.hidden_size = req_size(j, "hidden_size", where);
    c.num_attention_heads = req_size(j, "num_attention_heads", where);
    c.num_query_groups = opt_size(j, "num_key_value_heads", c.num_attention_heads, where);
    const bool has_head_dim = j.contains("head_dim") && !j["head_dim"].is_null();
    if (!has_head_dim)
      require_divisible(c.hidden_size, "hidden_size", c.num_attention_heads, "num_attention_heads", where);
    c.kv_channels = has_head_dim ? req_size(j, "head_dim", where) : c.hidden_size / c.num_attention_heads;
    c.ffn_hidden_size = req_size(j, "intermediate_size", where);
    c.vocab_size = req_size(j, "vocab_size", where, 2);
    c.max_position_embeddings = req_size(j, "max_position_embeddings", where);
    c.normalization = NormKind::RMSNorm;
    c.norm_epsilon = static_cast<float>(positive(opt<double>(j, "rms_norm_eps", 1e-6, where), "rms_norm_eps", where));
    const std::string act = opt<std::string>(j, "hidden_act", "silu", where);
    MEGADLM_CHECK(act == "silu", where, ": hidden_act '", act, "' is not supported (only silu, i.e. SwiGLU)");
    c.activation = Activation::SwiGLU;
    c.position_embedding = PositionEmbedding::Rope;
    c.rotary_base = rope_theta(j, where);
    c.add_bias_linear = false;
    MEGADLM_CHECK(!opt<bool>(j, "mlp_bias", false, where), where, ": mlp_bias is not supported");
    MEGADLM_CHECK(!opt<bool>(j, "attention_bias", false, where), where,
                  ": attention_bias (biases on q, k, v and o) is not supported; only Qwen2's q/k/v biases are");
    c.add_qkv_bias = info.layout == HfLayout::Qwen2;
    c.qk_layernorm = info.layout == HfLayout::Qwen3 || info.layout == HfLayout::Qwen3Moe;
    if (info.layout == HfLayout::Mixtral || info.layout == HfLayout::Qwen3Moe) read_moe_fields(j, info.layout, c, where);
    if (info.layout != HfLayout::Llama && info.layout != HfLayout::Mixtral) {
      // Qwen2/3 keep sliding_window set even when unused; only use_sliding_window turns it on.
      MEGADLM_CHECK(!opt<bool>(j, "use_sliding_window", false, where), where,
                    ": use_sliding_window is true (sliding-window attention is not supported)");
    } else {
      MEGADLM_CHECK(!j.contains("sliding_window") || j["sliding_window"].is_null(), where,
                    ": sliding_window is set (sliding-window attention is not supported)");
    }
    if (j.contains("layer_types") && j["layer_types"].is_array())
      for (const auto& t : j["layer_types"])
        MEGADLM_CHECK(t == "full_attention", where, ": layer_types holds '", t.get<std::string>(),
                      "'; only full_attention is supported");
    c.untie_embeddings_and_output_weights = !opt<bool>(j, "tie_word_embeddings", false, where);
    read_diffusion_fields(j, info);
  }
  refuse_a_model_beyond_memory(c, where);
  if (info.layout == HfLayout::Qwen3Moe) read_moe_layer_pattern(j, c, where);
  MEGADLM_CHECK(c.num_attention_heads % c.num_query_groups == 0, where, ": config.json's key/value heads (",
                info.layout == HfLayout::LLaDA ? "n_kv_heads " : "num_key_value_heads ", c.num_query_groups,
                ") do not divide its attention heads (", info.layout == HfLayout::LLaDA ? "n_heads " : "num_attention_heads ",
                c.num_attention_heads, ")");
  return info;
}

json hf_config_from_info(const HfModelInfo& info, DType dtype) {
  const TransformerConfig& c = info.config;
  const HfLayout l = info.layout;
  const std::string where = std::string("export to ") + hf_layout_name(l);
  const char* dt = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  json j;
  j["architectures"] = json::array({hf_architecture_name(l)});
  j["torch_dtype"] = dt;
  auto id_or_null = [](int32_t v) { return v >= 0 ? json(v) : json(nullptr); };
  const bool tied = !c.untie_embeddings_and_output_weights;
  if (l == HfLayout::GPT2) {
    MEGADLM_CHECK(c.normalization == NormKind::LayerNorm && c.activation == Activation::Gelu && c.add_bias_linear &&
                   c.position_embedding == PositionEmbedding::LearnedAbsolute && !c.qk_layernorm &&
                   c.num_query_groups == c.num_attention_heads && c.kv_channels * c.num_attention_heads == c.hidden_size,
                  where, ": GPT-2 needs LayerNorm, GELU, biases, learned positions, no GQA or QK-norm and "
                  "kv_channels * heads == hidden");
    j["model_type"] = "gpt2";
    j["n_layer"] = c.num_layers;
    j["n_embd"] = c.hidden_size;
    j["n_head"] = c.num_attention_heads;
    j["n_inner"] = c.ffn_hidden_size;
    j["n_positions"] = c.max_position_embeddings;
    j["n_ctx"] = c.max_position_embeddings;
    j["vocab_size"] = c.vocab_size;
    j["layer_norm_epsilon"] = hf_decimal(c.norm_epsilon);
    j["activation_function"] = "gelu_new";
    j["attn_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["resid_pdrop"] = 0.0;
  } else {
    MEGADLM_CHECK(c.normalization == NormKind::RMSNorm && c.activation == Activation::SwiGLU &&
                   c.position_embedding == PositionEmbedding::Rope && !c.add_bias_linear,
                  where, ": needs RMSNorm, SwiGLU, RoPE and no linear biases (--disable-bias-linear)");
    if (l == HfLayout::Llama || l == HfLayout::LLaDA) {
      MEGADLM_CHECK(!c.qk_layernorm, where, ": the model has QK-norm; export it as qwen3");
      MEGADLM_CHECK(!c.add_qkv_bias, where, ": the model has q/k/v biases; export it as qwen2");
    }
    if (l == HfLayout::Qwen2) {
      MEGADLM_CHECK(!c.qk_layernorm, where, ": the model has QK-norm; export it as qwen3");
      MEGADLM_CHECK(c.add_qkv_bias, where, ": Qwen2 has q/k/v biases but the model has none; export it as llama");
    }
    const bool moe_layout = l == HfLayout::Mixtral || l == HfLayout::Qwen3Moe;
    MEGADLM_CHECK(moe_layout == c.moe.enabled(), where, moe_layout ? ": the model has no MoE layers; use a dense layout"
                                                                 : ": the model has MoE layers; export it as mixtral or qwen3_moe");
    if (moe_layout) {
      const MoEConfig& m = c.moe;
      MEGADLM_CHECK(m.router_type == MoERouterType::TopK && m.score_function == MoEScoreFunction::Softmax &&
                     m.shared_expert_size == 0 && m.capacity_factor <= 0,
                    where, ": needs a top-k softmax router, no shared experts and no capacity limit");
      MEGADLM_CHECK(!c.add_qkv_bias, where, ": q/k/v biases are not part of this layout");
      MEGADLM_CHECK((l == HfLayout::Qwen3Moe) == c.qk_layernorm, where,
                    l == HfLayout::Qwen3Moe ? ": Qwen3-MoE needs QK-norm" : ": the model has QK-norm; export it as qwen3_moe");
      j["num_local_experts"] = m.num_experts;
      j["num_experts_per_tok"] = m.topk;
      j["router_aux_loss_coef"] = m.aux_loss_coeff;
      j["output_router_logits"] = false;
      if (l == HfLayout::Mixtral) {
        MEGADLM_CHECK(!m.pre_softmax, where, ": Mixtral renormalises over the top-k (needs pre_softmax off)");
        const int64_t F = m.ffn_hidden_size > 0 ? m.ffn_hidden_size : c.ffn_hidden_size;
        MEGADLM_CHECK(F == c.ffn_hidden_size, where, ": Mixtral has one ffn size for its experts");
        for (int64_t i = 0; i < c.num_layers; ++i)
          MEGADLM_CHECK(m.is_moe_layer(i), where, ": Mixtral needs every layer to be MoE; layer ", i, " is dense");
      } else {
        j["num_experts"] = m.num_experts;
        j["moe_intermediate_size"] = m.ffn_hidden_size > 0 ? m.ffn_hidden_size : c.ffn_hidden_size;
        j["norm_topk_prob"] = !m.pre_softmax;
        j["decoder_sparse_step"] = 1;
        json dense = json::array();
        for (int64_t i = 0; i < c.num_layers; ++i)
          if (!m.is_moe_layer(i)) dense.push_back(i);
        j["mlp_only_layers"] = dense;
      }
    }
    if (l == HfLayout::Qwen3) {
      MEGADLM_CHECK(c.qk_layernorm, where, ": Qwen3 has QK-norm but the model has none; export it as llama");
      MEGADLM_CHECK(!c.add_qkv_bias, where, ": the model has q/k/v biases, which Qwen3 lacks; export it as qwen2");
    }
    if (l == HfLayout::LLaDA) {
      MEGADLM_CHECK(c.kv_channels * c.num_attention_heads == c.hidden_size, where,
                    ": LLaDA needs kv_channels * heads == hidden");
      j["model_type"] = "llada";
      j["d_model"] = c.hidden_size;
      j["n_heads"] = c.num_attention_heads;
      j["n_kv_heads"] = c.num_query_groups;
      j["n_layers"] = c.num_layers;
      j["mlp_hidden_size"] = c.ffn_hidden_size;
      j["mlp_ratio"] = 4;
      j["vocab_size"] = c.vocab_size;
      j["embedding_size"] = c.vocab_size;
      j["max_sequence_length"] = c.max_position_embeddings;
      j["rope"] = true;
      j["rope_theta"] = c.rotary_base;
      j["rope_full_precision"] = true;
      j["layer_norm_type"] = "rms";
      j["rms_norm_eps"] = hf_decimal(c.norm_epsilon);
      j["activation_type"] = "silu";
      j["block_type"] = "llama";
      j["weight_tying"] = tied;
      j["include_bias"] = false;
      j["include_qkv_bias"] = false;
      j["alibi"] = false;
      j["attention_layer_norm"] = false;
      j["bias_for_layer_norm"] = false;
      j["input_emb_norm"] = false;
      j["scale_logits"] = false;
      j["attention_dropout"] = 0.0;
      j["residual_dropout"] = 0.0;
      j["embedding_dropout"] = 0.0;
      j["init_std"] = hf_decimal(c.init_method_std);
      j["mask_token_id"] = id_or_null(info.mask_token_id);
      j["eos_token_id"] = id_or_null(info.eos_token_id);
      j["pad_token_id"] = id_or_null(info.eos_token_id);
      return j;
    }
    j["model_type"] = hf_layout_name(l);
    j["num_hidden_layers"] = c.num_layers;
    j["hidden_size"] = c.hidden_size;
    j["num_attention_heads"] = c.num_attention_heads;
    j["num_key_value_heads"] = c.num_query_groups;
    j["head_dim"] = c.kv_channels;
    j["intermediate_size"] = c.ffn_hidden_size;
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = hf_decimal(c.norm_epsilon);
    j["hidden_act"] = "silu";
    j["rope_theta"] = c.rotary_base;
    j["rope_scaling"] = nullptr;
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    if (l == HfLayout::Llama) j["mlp_bias"] = false;
    else {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
    }
  }
  j["initializer_range"] = hf_decimal(c.init_method_std);
  j["tie_word_embeddings"] = tied;
  j["bos_token_id"] = id_or_null(info.bos_token_id);
  j["eos_token_id"] = id_or_null(info.eos_token_id);
  if (info.diffusion) {
    // transformers ignores these; they tell a reader (and our importer) that the model is a masked
    // diffusion model with bidirectional attention.
    j["is_causal"] = c.attention_mask == MaskType::Causal;
    j["mask_token_id"] = id_or_null(info.mask_token_id);
    j["megadlm_model_type"] = "difflm";
    j["megadlm_attention_mask_type"] = c.attention_mask == MaskType::None     ? "no_mask"
                                       : c.attention_mask == MaskType::Causal ? "causal"
                                                                                    : "block_causal";
    if (c.attention_mask == MaskType::BlockCausal) j["megadlm_attention_block_size"] = c.attention_block_size;
  }
  return j;
}

}  // namespace megadlm
