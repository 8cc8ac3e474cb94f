#include "checkpoint/hf_t5.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/hf_json.h"
#include "checkpoint/hf_tensor_map.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/error.h"
#include "core/file_io.h"

namespace megadlm {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// Where a file may keep the shared embedding, in the order they are looked for.
const char* const kEmbeddingNames[] = {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"};
// A tensor transformers' T5ForConditionalGeneration ignores when a file has it.
const char* const kIgnored = "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight";

// "encoder.layers.3.mlp.wo.weight" -> HF's name of the part after "layers.3." in that stack's block 3.
std::string layer_name(const std::string& stack, const std::string& index, const std::string& rest) {
  const bool dec = stack == "decoder";
  const std::string block = stack + ".block." + index + ".layer.";
  const std::string ff = dec ? "2" : "1";
  static const std::pair<const char*, const char*> attn[] = {
      {"q_proj.weight", "q.weight"}, {"k_proj.weight", "k.weight"}, {"v_proj.weight", "v.weight"},
      {"o_proj.weight", "o.weight"}, {"relative_attention_bias.weight", "relative_attention_bias.weight"}};
  auto attention = [&](const std::string& ours, const std::string& hf, const std::string& layer) -> std::string {
    if (!starts_with(rest, ours)) return "";
    const std::string tail = rest.substr(ours.size());
    for (const auto& [a, b] : attn)
      if (tail == a && (tail[0] != 'r' || (ours == "self_attn." && index == "0")))
        return block + layer + "." + hf + "." + b;
    return "";
  };
  if (rest == "input_layernorm.weight") return block + "0.layer_norm.weight";
  if (rest == "post_attention_layernorm.weight") return block + ff + ".layer_norm.weight";
  if (dec && rest == "pre_cross_attn_layernorm.weight") return block + "1.layer_norm.weight";
  if (std::string n = attention("self_attn.", "SelfAttention", "0"); !n.empty()) return n;
  if (dec)
    if (std::string n = attention("cross_attn.", "EncDecAttention", "1"); !n.empty()) return n;
  for (const char* w : {"wi", "wi_0", "wi_1", "wo"})
    if (rest == std::string("mlp.") + w + ".weight") return block + ff + ".DenseReluDense." + w + ".weight";
  return "";
}

}  // namespace

bool is_hf_t5_config(const json& j) {
  if (!j.is_object()) return false;
  return (j.contains("model_type") && j["model_type"] == "t5") || starts_with(hf_architecture(j), "T5");
}

HfT5Info hf_t5_config_to_info(const json& j, const std::string& where) {
  MEGADLM_CHECK(j.is_object(), where, ": config.json is not a JSON object");
  const std::string arch = hf_architecture(j);
  MEGADLM_CHECK(arch.empty() || arch == "T5ForConditionalGeneration", where, ": architecture '", arch,
                "' is not converted; the t5 layout reads T5ForConditionalGeneration");
  const bool no = false, yes = true;
  MEGADLM_CHECK(!hf_field<bool>(j, "is_decoder", where, &no), where,
                ": config.json sets is_decoder (T5's decoder alone is not built)");
  HfT5Info info;
  TransformerConfig& c = info.config;
  T5Options& o = info.options;
  c.vocab_size = hf_size_field(j, "vocab_size", where);
  c.hidden_size = hf_size_field(j, "d_model", where);
  c.kv_channels = hf_size_field(j, "d_kv", where);
  c.ffn_hidden_size = hf_size_field(j, "d_ff", where);
  c.num_layers = hf_size_field(j, "num_layers", where);
  c.num_attention_heads = hf_size_field(j, "num_heads", where);
  c.num_query_groups = c.num_attention_heads;
  o.num_decoder_layers = hf_size_field(j, "num_decoder_layers", where, &c.num_layers);
  const int64_t buckets = 32, distance = 128;
  o.relative_attention_num_buckets = hf_size_field(j, "relative_attention_num_buckets", where, &buckets);
  o.relative_attention_max_distance = hf_size_field(j, "relative_attention_max_distance", where, &distance);
  const std::string relu = "relu";
  o.feed_forward = t5_feed_forward_from_name(hf_field<std::string>(j, "feed_forward_proj", where, &relu), where);
  const bool tie = hf_field<bool>(j, "tie_word_embeddings", where, &yes);
  o.scale_output = hf_field<bool>(j, "scale_decoder_outputs", where, &tie);
  c.norm_epsilon = hf_epsilon_field(j, "layer_norm_epsilon", where, 1e-6);
  c.normalization = NormKind::RMSNorm;
  c.add_bias_linear = false;
  c.position_embedding = PositionEmbedding::None;
  c.attention_mask = MaskType::None;
  c.untie_embeddings_and_output_weights = !tie;
  const int32_t pad = 0, eos = 1;
  auto token = [&](const char* key, const int32_t* dflt) {
    return j.contains(key) && j[key].is_number_integer() ? hf_field<int32_t>(j, key, where, dflt) : *dflt;
  };
  info.pad_token_id = token("pad_token_id", &pad);
  info.eos_token_id = token("eos_token_id", &eos);
  info.decoder_start_token_id = token("decoder_start_token_id", &info.pad_token_id);
  try {
    validate_t5(c, o);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return info;
}

json hf_t5_config_from_info(const HfT5Info& info, DType dtype) {
  const TransformerConfig& c = info.config;
  const T5Options& o = info.options;
  validate_t5(c, o);
  hf_refuse_padded_vocab(c, "t5");
  const bool gated = o.feed_forward == T5FeedForward::GatedGelu;
  json j;
  j["architectures"] = {"T5ForConditionalGeneration"};
  j["model_type"] = "t5";
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.hidden_size;
  j["d_kv"] = c.kv_channels;
  j["d_ff"] = c.ffn_hidden_size;
  j["num_layers"] = c.num_layers;
  j["num_decoder_layers"] = o.num_decoder_layers;
  j["num_heads"] = c.num_attention_heads;
  j["relative_attention_num_buckets"] = o.relative_attention_num_buckets;
  j["relative_attention_max_distance"] = o.relative_attention_max_distance;
  j["feed_forward_proj"] = t5_feed_forward_name(o.feed_forward);
  j["dense_act_fn"] = gated ? "gelu_new" : "relu";
  j["is_gated_act"] = gated;
  j["layer_norm_epsilon"] = hf_decimal(c.norm_epsilon);
  j["tie_word_embeddings"] = o.scale_output;
  j["scale_decoder_outputs"] = o.scale_output;
  j["is_encoder_decoder"] = true;
  j["dropout_rate"] = 0.1;
  j["initializer_factor"] = 1.0;
  j["pad_token_id"] = info.pad_token_id;
  j["eos_token_id"] = info.eos_token_id;
  j["decoder_start_token_id"] = info.decoder_start_token_id;
  j["dtype"] = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  return j;
}

std::string hf_t5_name(const std::string& ours) {
  if (ours == "embed_tokens.weight") return "shared.weight";
  if (ours == "lm_head.weight") return "lm_head.weight";
  for (const std::string stack : {"encoder", "decoder"}) {
    if (ours == stack + ".norm.weight") return stack + ".final_layer_norm.weight";
    const std::string p = stack + ".layers.";
    if (!starts_with(ours, p)) continue;
    const size_t dot = ours.find('.', p.size());
    if (dot == std::string::npos) break;
    const std::string index = ours.substr(p.size(), dot - p.size());
    const std::string hf = layer_name(stack, index, ours.substr(dot + 1));
    if (!hf.empty()) return hf;
  }
  fail("layout t5: parameter '", ours, "' has no HuggingFace counterpart");
}

HfT5Checkpoint read_hf_t5_checkpoint(const std::string& dir) {
  HfT5Checkpoint ck;
  ck.info = hf_t5_config_to_info(read_hf_config_json(dir), dir + "/config.json");
  ShardedSafetensors st(dir);
  ck.dtype = st.dominant_dtype();
  // The shared embedding, wherever the file keeps it; its other names must be copies of it.
  std::string embedding;
  for (const char* n : kEmbeddingNames)
    if (embedding.empty() && st.has(n)) embedding = n;
  MEGADLM_CHECK(!embedding.empty(), dir, ": tensor 'shared.weight' (for our embed_tokens.weight) is missing");
  for (const char* n : kEmbeddingNames)
    MEGADLM_CHECK(!st.has(n) || hf_same_tensor(st, n, embedding), dir, ": tensor '", n, "' differs from '", embedding,
                  "': both are T5's one shared embedding");
  const bool untied = st.has("lm_head.weight") && !hf_same_tensor(st, "lm_head.weight", embedding);
  ck.info.config.untie_embeddings_and_output_weights = untied;
  const T5Model shapes(ck.info.config, ck.info.options, ParallelContext::single());
  std::set<std::string> used(std::begin(kEmbeddingNames), std::end(kEmbeddingNames));
  if (!untied) used.insert("lm_head.weight");  // absent, or the embedding again
  used.insert(kIgnored);
  for (const ParamInfo& p : shapes.params().infos()) {
    const std::string hf = p.name == "embed_tokens.weight" ? embedding : hf_t5_name(p.name);
    ck.params.push_back({p.name, hf_read_param(st, dir, hf, p)});
    used.insert(hf);
  }
  for (const std::string& n : st.names())
    MEGADLM_CHECK(used.count(n), dir, ": tensor '", n, "' is not used by the t5 layout with this config.json");
  return ck;
}

HfT5Info hf_t5_info(const T5Model& model) {
  HfT5Info info;
  info.config = model.config();
  info.options = model.options();
  return info;
}

void write_hf_t5_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params, const HfT5Info& info,
                            const HfWriteOptions& opt) {
  hf_check_export_dtype(opt.dtype);
  const json cfg = hf_t5_config_from_info(info, opt.dtype);  // first: refuses what HF's T5 cannot hold
  std::vector<SafetensorsEntry> hf;
  auto add = [&](const std::string& name, const Tensor& src) { hf.push_back({name, hf_narrowed(src, opt.dtype, name)}); };
  // tie_word_embeddings false (the output unscaled) makes transformers 4 read an lm_head: a tied model
  // then writes the embedding there too.
  const bool head_copy = !info.config.untie_embeddings_and_output_weights && !info.options.scale_output;
  for (const SafetensorsEntry& e : params) {
    add(hf_t5_name(e.name), e.tensor);
    if (head_copy && e.name == "embed_tokens.weight") add("lm_head.weight", e.tensor);
  }
  fs::create_directories(dir);
  write_sharded_safetensors(dir, hf, opt.max_shard_bytes, {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

}  // namespace megadlm
