#include "train/hf_init.h"

#include <cmath>
#include <sstream>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_convert.h"
#include "checkpoint/hf_tokenizer.h"
#include "core/error.h"
#include "core/log.h"
#include "models/config_json.h"

namespace megadlm {

namespace {

template <typename T>
std::string str(const T& v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

void apply_hf_config(TrainArgs& a, const CliFlags& f) {
  const std::string dir = a.load_hf;
  const std::string where = dir + "/config.json";
  const nlohmann::json raw = [&] {
    try {
      return nlohmann::json::parse(read_file(where));
    } catch (const nlohmann::json::exception& e) {
      fail(where, ": not valid JSON (", e.what(), ")");
    }
  }();
  const HfModelInfo info = hf_config_to_info(raw, where);
  const TransformerConfig& h = info.config;
  const TransformerConfig& m = a.model;  // as parsed from the flags
  // Every model flag given on the command line must agree with config.json.
  std::string diff;
  auto check = [&](const char* flag, bool same, const std::string& mine, const std::string& theirs) {
    if (f.given(flag) && !same) diff += " --" + std::string(flag) + " (flag: " + mine + ", config.json: " + theirs + ")";
  };
  check("num-layers", m.num_layers == h.num_layers, str(m.num_layers), str(h.num_layers));
  check("hidden-size", m.hidden_size == h.hidden_size, str(m.hidden_size), str(h.hidden_size));
  check("num-attention-heads", m.num_attention_heads == h.num_attention_heads, str(m.num_attention_heads),
        str(h.num_attention_heads));
  check("num-query-groups", m.num_query_groups == h.num_query_groups, str(m.num_query_groups), str(h.num_query_groups));
  check("group-query-attention", h.num_query_groups != h.num_attention_heads, "true", "no GQA");
  check("kv-channels", m.kv_channels == h.kv_channels, str(m.kv_channels), str(h.kv_channels));
  check("ffn-hidden-size", m.ffn_hidden_size == h.ffn_hidden_size, str(m.ffn_hidden_size), str(h.ffn_hidden_size));
  check("max-position-embeddings", m.max_position_embeddings == h.max_position_embeddings,
        str(m.max_position_embeddings), str(h.max_position_embeddings));
  check("normalization", m.normalization == h.normalization, f.get_string("normalization"),
        h.normalization == NormKind::LayerNorm ? "LayerNorm" : "RMSNorm");
  check("norm-epsilon", std::fabs(m.norm_epsilon - h.norm_epsilon) <= 1e-6f * h.norm_epsilon, str(m.norm_epsilon),
        str(h.norm_epsilon));
  check("swiglu", h.activation == Activation::SwiGLU, "true", "gelu");
  check("position-embedding-type", m.position_embedding == h.position_embedding, f.get_string("position-embedding-type"),
        h.position_embedding == PositionEmbedding::Rope ? "rope" : "learned_absolute");
  check("rotary-base", m.rotary_base == h.rotary_base, str(m.rotary_base), str(h.rotary_base));
  check("qk-layernorm", h.qk_layernorm, "true", "false");
  check("disable-bias-linear", !h.add_bias_linear, "true", "biases");
  check("add-qkv-bias", h.add_qkv_bias, "true", "false");
  check("untie-embeddings-and-output-weights", h.untie_embeddings_and_output_weights, "true", "tied");
  MEGADLM_CHECK(diff.empty(), "--load-hf ", dir, ": flags contradict its config.json:", diff,
                " (leave model flags out: they come from config.json)");
  MEGADLM_CHECK(a.seq_length <= h.max_position_embeddings, "--seq-length ", a.seq_length, " exceeds ", where,
                " max_position_embeddings ", h.max_position_embeddings);
  TransformerConfig c = h;
  c.attention_mask = m.attention_mask;  // from --model-type / --attention-mask-type
  c.attention_block_size = m.attention_block_size;
  if (f.given("init-method-std")) c.init_method_std = m.init_method_std;
  a.model = c;
  if (a.tokenizer_type.empty() && a.tokenizer_model.empty() && a.vocab_file.empty()) {
    const TokenizerSpec s = hf_tokenizer_spec(dir);
    a.tokenizer_type = s.type;
    a.tokenizer_model = s.tokenizer_model;
    a.vocab_file = s.vocab_file;
    a.merge_file = s.merge_file;
  }
  if (a.mask_token.empty() && a.model_type == ModelType::DiffLM && info.mask_token_id >= 0)
    a.mask_token = std::to_string(info.mask_token_id);
}

int64_t hf_adapted_vocab_size(int64_t hf_vocab, int64_t tokenizer_vocab) { return std::max(hf_vocab, tokenizer_vocab); }

int64_t load_hf_into_model(const std::string& dir, LanguageModel& model) {
  HfCheckpoint ck = read_hf_checkpoint(dir);
  const int64_t V = model.config().vocab_size, C = model.config().hidden_size;
  const int64_t V0 = ck.info.config.vocab_size;
  MEGADLM_CHECK(V >= V0, dir, ": the model's vocabulary (", V, ") is smaller than the checkpoint's (", V0, ")");
  for (auto& e : ck.params) {
    if (e.name != "embed_tokens.weight" && e.name != "lm_head.weight") continue;
    if (V == V0) continue;
    // New rows (an appended mask token, or ids the tokenizer has beyond the checkpoint): the mean of
    // the existing rows, so the new token starts as an "average" token rather than an outlier.
    Tensor grown = Tensor::empty({V, C}, DType::F32);
    const float* src = e.tensor.data<float>();
    float* dst = grown.data<float>();
    std::copy(src, src + V0 * C, dst);
    std::vector<double> mean(static_cast<size_t>(C), 0.0);
    for (int64_t v = 0; v < V0; ++v)
      for (int64_t c = 0; c < C; ++c) mean[static_cast<size_t>(c)] += src[v * C + c];
    for (int64_t v = V0; v < V; ++v)
      for (int64_t c = 0; c < C; ++c) dst[v * C + c] = static_cast<float>(mean[static_cast<size_t>(c)] / static_cast<double>(V0));
    e.tensor = grown;
  }
  load_params_into(ck.params, model.params(), dir);
  log_info("loaded HuggingFace checkpoint ", dir, " (", hf_architecture_name(ck.info.layout), ", ",
           dtype_name(ck.dtype), ")", V > V0 ? "; vocabulary grown from " + std::to_string(V0) + " to " + std::to_string(V) +
           " rows (new rows = mean of the existing ones)" : std::string());
  return V - V0;
}

}  // namespace megadlm
