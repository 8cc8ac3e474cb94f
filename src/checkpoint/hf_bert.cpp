#include "checkpoint/hf_bert.h"

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

// The HF tensors a BERT file may hold besides the parameters: buffers, and the tied decoder.
bool buffer_or_tied(const std::string& hf) {
  return hf == "bert.embeddings.position_ids" || hf == "bert.embeddings.token_type_ids" ||
         hf == "cls.predictions.decoder.weight" || hf == "cls.predictions.decoder.bias";
}

// The tied decoder, where a file stores it, must be the tensor we keep in its place.
void check_tied(const ShardedSafetensors& st, const std::string& dir, const char* tied, const char* kept) {
  if (!st.has(tied) || !st.has(kept)) return;
  MEGADLM_CHECK(hf_same_tensor(st, tied, kept), dir, ": tensor '", tied,
                "' differs from '", kept, "': the MLM decoder must be tied to it (an untied decoder is not built)");
}

}  // namespace

bool is_hf_bert_config(const json& j) {
  if (!j.is_object()) return false;
  const std::string arch = hf_architecture(j);
  return (j.contains("model_type") && j["model_type"] == "bert") || starts_with(arch, "Bert");
}

HfBertInfo hf_bert_config_to_info(const json& j, const std::string& where) {
  MEGADLM_CHECK(j.is_object(), where, ": config.json is not a JSON object");
  HfBertInfo info;
  const std::string arch = hf_architecture(j);
  MEGADLM_CHECK(arch == "BertForPreTraining" || arch == "BertForMaskedLM", where, ": architecture '", arch,
                "' is not converted; the bert layout reads BertForPreTraining and BertForMaskedLM");
  info.options.binary_head = arch == "BertForPreTraining";
  info.options.pre_norm = false;
  const bool no = false, yes = true;
  MEGADLM_CHECK(!hf_field<bool>(j, "is_decoder", where, &no), where,
                ": config.json sets is_decoder (a BERT decoder is not built)");
  MEGADLM_CHECK(!hf_field<bool>(j, "add_cross_attention", where, &no), where,
                ": config.json sets add_cross_attention (not built)");
  MEGADLM_CHECK(hf_field<bool>(j, "tie_word_embeddings", where, &yes), where,
                ": config.json unties the word embeddings (an untied MLM decoder is not built)");
  const std::string absolute = "absolute";
  const std::string pos = hf_field<std::string>(j, "position_embedding_type", where, &absolute);
  MEGADLM_CHECK(pos == "absolute", where, ": config.json position_embedding_type '", pos,
                "' is not built (absolute only)");
  const std::string gelu = "gelu";
  const std::string act = hf_field<std::string>(j, "hidden_act", where, &gelu);
  MEGADLM_CHECK(act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh", where, ": config.json hidden_act '",
                act, "' is not built (gelu, gelu_new, gelu_pytorch_tanh)");
  info.options.exact_gelu = act == "gelu";
  TransformerConfig& c = info.config;
  c.vocab_size = hf_size_field(j, "vocab_size", where);
  c.hidden_size = hf_size_field(j, "hidden_size", where);
  c.num_layers = hf_size_field(j, "num_hidden_layers", where);
  c.num_attention_heads = hf_size_field(j, "num_attention_heads", where);
  MEGADLM_CHECK(c.hidden_size % c.num_attention_heads == 0, where, ": config.json hidden_size ", c.hidden_size,
                " is not a multiple of num_attention_heads ", c.num_attention_heads);
  c.num_query_groups = c.num_attention_heads;
  c.kv_channels = c.hidden_size / c.num_attention_heads;
  c.ffn_hidden_size = hf_size_field(j, "intermediate_size", where);
  c.max_position_embeddings = hf_size_field(j, "max_position_embeddings", where);
  info.options.token_types = hf_size_field(j, "type_vocab_size", where);
  const double std_default = 0.02;
  c.norm_epsilon = hf_epsilon_field(j, "layer_norm_eps", where, 1e-12);
  c.init_method_std = static_cast<float>(hf_field<double>(j, "initializer_range", where, &std_default));
  c.normalization = NormKind::LayerNorm;
  c.activation = Activation::Gelu;
  c.add_bias_linear = true;
  c.position_embedding = PositionEmbedding::LearnedAbsolute;
  c.attention_mask = MaskType::None;
  c.untie_embeddings_and_output_weights = false;
  const int32_t zero = 0;
  info.pad_token_id = j.contains("pad_token_id") && j["pad_token_id"].is_number_integer()
                          ? hf_field<int32_t>(j, "pad_token_id", where, &zero)
                          : 0;
  return info;
}

json hf_bert_config_from_info(const HfBertInfo& info, DType dtype) {
  const TransformerConfig& c = info.config;
  MEGADLM_CHECK(!info.options.pre_norm,
                "layout bert: HuggingFace's BERT is post-norm; a pre-norm model has no HF form");
  MEGADLM_CHECK(c.add_bias_linear, "layout bert: HuggingFace's BERT has biases everywhere (no --disable-bias-linear)");
  MEGADLM_CHECK(c.num_query_groups == c.num_attention_heads && c.kv_channels * c.num_attention_heads == c.hidden_size,
                "layout bert: HuggingFace's BERT has hidden / heads channels a head and no grouped-query attention");
  hf_refuse_padded_vocab(c, "bert");
  json j;
  j["architectures"] = {info.options.binary_head ? "BertForPreTraining" : "BertForMaskedLM"};
  j["model_type"] = "bert";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.ffn_hidden_size;
  j["hidden_act"] = info.options.exact_gelu ? "gelu" : "gelu_new";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["type_vocab_size"] = info.options.token_types;
  j["layer_norm_eps"] = hf_decimal(c.norm_epsilon);
  j["initializer_range"] = hf_decimal(c.init_method_std);
  j["position_embedding_type"] = "absolute";
  j["hidden_dropout_prob"] = 0.1;
  j["attention_probs_dropout_prob"] = 0.1;
  j["pad_token_id"] = info.pad_token_id;
  j["tie_word_embeddings"] = true;
  j["dtype"] = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  return j;
}

std::string hf_bert_name(const std::string& ours) {
  const std::string suffix = ours.size() > 5 && ours.compare(ours.size() - 5, 5, ".bias") == 0 ? "bias" : "weight";
  if (ours == "embed_tokens.weight") return "bert.embeddings.word_embeddings.weight";
  if (ours == "embed_positions.weight") return "bert.embeddings.position_embeddings.weight";
  if (ours == "embed_token_types.weight") return "bert.embeddings.token_type_embeddings.weight";
  if (starts_with(ours, "embed_norm.")) return "bert.embeddings.LayerNorm." + suffix;
  if (starts_with(ours, "pooler.dense.")) return "bert.pooler.dense." + suffix;
  if (starts_with(ours, "mlm_head.dense.")) return "cls.predictions.transform.dense." + suffix;
  if (starts_with(ours, "mlm_head.norm.")) return "cls.predictions.transform.LayerNorm." + suffix;
  if (ours == "mlm_head.bias") return "cls.predictions.bias";
  if (starts_with(ours, "binary_head.")) return "cls.seq_relationship." + suffix;
  if (starts_with(ours, "layers.")) {
    const size_t dot = ours.find('.', 7);
    if (dot != std::string::npos) {
      const std::string p = "bert.encoder.layer." + ours.substr(7, dot - 7) + ".";
      const std::string rest = ours.substr(dot + 1);
      const std::pair<const char*, const char*> map[] = {
          {"self_attn.q_proj.", "attention.self.query."},     {"self_attn.k_proj.", "attention.self.key."},
          {"self_attn.v_proj.", "attention.self.value."},     {"self_attn.o_proj.", "attention.output.dense."},
          {"input_layernorm.", "attention.output.LayerNorm."}, {"mlp.fc1.", "intermediate.dense."},
          {"mlp.fc2.", "output.dense."},                      {"post_attention_layernorm.", "output.LayerNorm."}};
      for (const auto& [a, b] : map)
        if (starts_with(rest, a) && rest.size() == std::strlen(a) + suffix.size()) return p + b + suffix;
    }
  }
  fail("layout bert: parameter '", ours, "' has no HuggingFace counterpart");
}

HfBertCheckpoint read_hf_bert_checkpoint(const std::string& dir) {
  HfBertCheckpoint ck;
  const std::string cfg_path = dir + "/config.json";
  ck.info = hf_bert_config_to_info(read_hf_config_json(dir), cfg_path);
  const BertModel shapes(ck.info.config, bert_model_spec(ck.info.config, ck.info.options), ParallelContext::single());
  ShardedSafetensors st(dir);
  ck.dtype = st.dominant_dtype();
  std::set<std::string> used;
  for (const ParamInfo& p : shapes.params().infos()) {
    const std::string hf = hf_bert_name(p.name);
    ck.params.push_back({p.name, hf_read_param(st, dir, hf, p)});
    used.insert(hf);
  }
  check_tied(st, dir, "cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight");
  check_tied(st, dir, "cls.predictions.decoder.bias", "cls.predictions.bias");
  for (const std::string& n : st.names()) {
    if (used.count(n) || buffer_or_tied(n)) continue;
    // BertForMaskedLM leaves a pretraining checkpoint's pooler and next-sentence head unused, as
    // transformers does.
    if (!ck.info.options.binary_head && (starts_with(n, "bert.pooler.") || starts_with(n, "cls.seq_relationship.")))
      continue;
    fail(dir, ": tensor '", n, "' is not used by the bert layout with this config.json");
  }
  return ck;
}

HfBertInfo hf_bert_info(const BertModel& model) {
  HfBertInfo info;
  info.config = model.config();
  info.options.pre_norm = model.pre_norm();
  info.options.binary_head = model.has_binary_head();
  info.options.exact_gelu = model.exact_gelu();
  info.options.token_types = model.token_types();
  return info;
}

void write_hf_bert_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params,
                              const HfBertInfo& info, const HfWriteOptions& opt) {
  hf_check_export_dtype(opt.dtype);
  const json cfg = hf_bert_config_from_info(info, opt.dtype);  // first: refuses what HF's BERT cannot hold
  std::vector<SafetensorsEntry> hf;
  for (const SafetensorsEntry& e : params) hf.push_back({hf_bert_name(e.name), hf_narrowed(e.tensor, opt.dtype, e.name)});
  fs::create_directories(dir);
  write_sharded_safetensors(dir, hf, opt.max_shard_bytes, {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

}  // namespace megadlm
