#include "checkpoint/hf_llava.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "checkpoint/hf_json.h"
#include "checkpoint/hf_tensor_map.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/error.h"
#include "core/file_io.h"
#include "models/clip_vision_model.h"
#include "models/language_model.h"
#include "nn/vision_projector.h"

namespace megadlm {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kTower = "vision_tower.", kProjector = "multi_modal_projector.";

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// config.json's sub-config `key` (vision_config, text_config), which must be an object of one of the
// model_types `types` (`family` names them in the Error otherwise).
const json& sub_config(const json& j, const char* key, const std::vector<std::string>& types, const char* family,
                       const std::string& where) {
  MEGADLM_CHECK(j.contains(key) && j[key].is_object(), where, ": config.json lacks the object '", key, "'");
  const json& c = j[key];
  const std::string t = hf_field<std::string>(c, "model_type", where + " (" + key + ")", nullptr);
  MEGADLM_CHECK(std::find(types.begin(), types.end(), t) != types.end(), where, ": ", key, ".model_type '", t,
                "' is not mapped (the llava layout holds a ", family, ")");
  return c;
}

// text_config (model_type llama or qwen2) with its config class's defaults for the keys it lacks that the
// text reader requires, as transformers builds it: llava-hf's configs (llava-1.5-7b-hf) give only what
// differs from LlamaConfig's. Qwen2Config has no default bos / eos.
json with_text_defaults(json text) {
  using Defaults = std::vector<std::pair<const char*, int64_t>>;
  const Defaults llama = {{"vocab_size", 32000},      {"hidden_size", 4096},         {"intermediate_size", 11008},
                          {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"max_position_embeddings", 2048},
                          {"bos_token_id", 1},       {"eos_token_id", 2}};
  const Defaults qwen2 = {{"vocab_size", 151936},     {"hidden_size", 4096},         {"intermediate_size", 22016},
                          {"num_hidden_layers", 32}, {"num_attention_heads", 32}, {"max_position_embeddings", 32768}};
  for (const auto& [key, value] : text["model_type"] == "qwen2" ? qwen2 : llama)
    if (!text.contains(key)) text[key] = value;
  return text;
}

// The settings of LlavaConfig that must have the one value our LLaVA model holds.
void refuse_unmapped_settings(const json& j, const std::string& where) {
  const std::string gelu = "gelu", dflt = "default";
  const bool yes = true;
  const std::string act = hf_field<std::string>(j, "projector_hidden_act", where, &gelu);
  MEGADLM_CHECK(act == "gelu", where, ": projector_hidden_act '", act,
                "' is not mapped (the projector mlp2x_gelu has the erf GELU: gelu)");
  const std::string strategy = hf_field<std::string>(j, "vision_feature_select_strategy", where, &dflt);
  MEGADLM_CHECK(strategy == "default", where, ": vision_feature_select_strategy '", strategy,
                "' is not built (only default: the class token dropped)");
  MEGADLM_CHECK(hf_field<bool>(j, "multimodal_projector_bias", where, &yes), where,
                ": multimodal_projector_bias false is not built (the projector has biases)");
  MEGADLM_CHECK(!j.contains("vision_feature_layer") || !j["vision_feature_layer"].is_array(), where,
                ": vision_feature_layer is a list (", j.contains("vision_feature_layer") ? j["vision_feature_layer"].dump() : "",
                "); one layer only is built");
}

// The names the file holds: transformers 5's, else the legacy ones; the tower's with "vision_model." when the
// file has it (transformers 4).
HfLlavaNames names_of(const ShardedSafetensors& st) {
  HfLlavaNames n;
  if (!st.has(n.language + "embed_tokens.weight") && st.has(hf_llava_legacy_names().language + "embed_tokens.weight"))
    n = hf_llava_legacy_names();
  if (st.has(n.vision + "vision_model.embeddings.class_embedding")) n.vision += "vision_model.";
  return n;
}

// The HF tensors a file may hold besides the parameters: buffers, and an lm_head equal to the embedding of a
// tied model (an Error when it differs).
bool unused_allowed(const ShardedSafetensors& st, const std::string& n, const HfLlavaNames& names, bool tied) {
  if (ignorable(n) || n == names.vision + "embeddings.position_ids") return true;
  if (!tied || n != names.head + "weight") return false;
  const std::string embedding = names.language + "embed_tokens.weight";
  MEGADLM_CHECK(hf_same_tensor(st, n, embedding), st.dir(), ": tie_word_embeddings is true but '", n, "' differs from '",
                embedding, "'");
  return true;
}

// Refuses, by name, what LlavaForConditionalGeneration cannot hold.
void check_exportable(const HfLlavaInfo& info) {
  const TransformerConfig& c = info.text.config;
  MEGADLM_CHECK(info.options.projector == ProjectorType::Mlp2xGelu, "layout llava: the projector is '",
                projector_type_name(info.options.projector),
                "'; LlavaForConditionalGeneration's is linear_1, GELU, linear_2 (mlp2x_gelu)");
  MEGADLM_CHECK(!info.text.diffusion && c.attention_mask == MaskType::Causal,
                "layout llava: the language model is a difflm (diffusion, bidirectional) backbone; "
                "LlavaForConditionalGeneration runs its text model causally (a gpt backbone exports)");
  const HfLayout l = default_hf_layout(c);
  MEGADLM_CHECK(l == HfLayout::Llama || l == HfLayout::Qwen2, "layout llava: the language model exports as ",
                hf_layout_name(l), ", which the llava layout does not map (its text model is llama or qwen2)");
}

json llava_config(const HfLlavaInfo& info, json text, DType dtype) {
  const LlavaOptions& o = info.options;
  HfClipVisionInfo tower;
  tower.config = o.vision;
  tower.options = o.clip;
  json vision = hf_clip_vision_config_from_info(tower, dtype);
  for (json* part : {&vision, &text})
    for (const char* key : {"architectures", "dtype", "torch_dtype"}) part->erase(key);
  const int64_t vocab = text["vocab_size"].get<int64_t>();
  MEGADLM_CHECK(o.image_token >= 0 && o.image_token < vocab, "layout llava: the image token ", o.image_token,
                " is outside the exported vocabulary of ", vocab);
  json j;
  j["architectures"] = {"LlavaForConditionalGeneration"};
  j["model_type"] = "llava";
  j["vision_config"] = vision;
  j["text_config"] = text;
  j["image_token_index"] = o.image_token;
  j["image_seq_length"] = o.patches();
  j["projector_hidden_act"] = "gelu";
  j["vision_feature_layer"] = o.clip.feature_layer;
  j["vision_feature_select_strategy"] = "default";
  j["multimodal_projector_bias"] = true;
  j["tie_word_embeddings"] = !info.text.config.untie_embeddings_and_output_weights;
  j["dtype"] = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  return j;
}

}  // namespace

HfLlavaNames hf_llava_legacy_names() {
  return {"vision_tower.", "multi_modal_projector.", "language_model.model.", "language_model.lm_head."};
}

bool is_hf_llava_config(const json& j) {
  return j.is_object() &&
         ((j.contains("model_type") && j["model_type"] == "llava") || hf_architecture(j) == "LlavaForConditionalGeneration");
}

HfLlavaInfo hf_llava_config_to_info(const json& j, const std::string& where) {
  MEGADLM_CHECK(j.is_object(), where, ": config.json is not a JSON object");
  const json& vision =
      sub_config(j, "vision_config", {"clip_vision_model"}, "CLIP vision tower: clip_vision_model", where);
  const json& text = sub_config(j, "text_config", {"llama", "qwen2"}, "LLaMA or Qwen2 text model: llama, qwen2", where);
  refuse_unmapped_settings(j, where);
  HfLlavaInfo info;
  info.text = hf_config_to_info(with_text_defaults(text), where + " (text_config)");
  MEGADLM_CHECK(!info.text.diffusion, where, ": text_config.is_causal is false; LlavaForConditionalGeneration's text ",
                "model is causal");
  // transformers ties the output to the embedding when either config says so.
  const bool no = false;
  if (hf_field<bool>(j, "tie_word_embeddings", where, &no)) info.text.config.untie_embeddings_and_output_weights = false;
  const HfClipVisionInfo tower = hf_clip_vision_config_to_info(vision, where + " (vision_config)");
  LlavaOptions& o = info.options;
  o.vision = tower.config;
  o.clip = tower.options;
  const int64_t layer = -2;
  o.clip.feature_layer = hf_field<int64_t>(j, "vision_feature_layer", where, &layer);
  clip_feature_layers(o.vision.num_layers, o.clip.feature_layer);  // an Error when out of range
  o.projector = ProjectorType::Mlp2xGelu;
  const int64_t image_default = 32000;  // LlavaConfig's
  const char* image_key = j.contains("image_token_index") ? "image_token_index" : "image_token_id";
  const int64_t image = hf_field<int64_t>(j, image_key, where, &image_default);
  MEGADLM_CHECK(image >= 0 && image < info.text.config.vocab_size, where, ": ", image_key, " ", image,
                " is outside text_config's vocabulary of ", info.text.config.vocab_size);
  o.image_token = static_cast<int32_t>(image);
  return info;
}

std::string hf_llava_vision_name(const HfLlavaNames& names, const std::string& ours) {
  if (starts_with(ours, kTower)) return names.vision + hf_clip_vision_name(ours.substr(kTower.size()));
  if (starts_with(ours, kProjector)) return names.projector + ours.substr(kProjector.size());
  fail("layout llava: parameter '", ours, "' is not the vision tower's or the projector's");
}

std::string hf_llava_text_name(const HfLlavaNames& names, const std::string& text_name) {
  if (starts_with(text_name, "model.")) return names.language + text_name.substr(6);
  if (starts_with(text_name, "lm_head.")) return names.head + text_name.substr(8);
  fail("layout llava: the text model's tensor '", text_name, "' has no place in LLaVA's names");
}

HfLlavaCheckpoint read_hf_llava_checkpoint(const std::string& dir) {
  HfLlavaCheckpoint ck;
  ck.info = hf_llava_config_to_info(read_hf_config_json(dir), dir + "/config.json");
  const LlavaOptions& o = ck.info.options;
  validate_config(ck.info.text.config);
  ShardedSafetensors st(dir);
  ck.dtype = st.dominant_dtype();
  ck.names = names_of(st);
  // The tower's and the projector's names and shapes, registered in LLaVA's order without allocating them.
  const ParallelContext ctx = ParallelContext::single();
  ParamStore shapes;
  const ClipVisionModel tower(o.vision, o.clip, ctx, &shapes, kTower);
  const VisionProjector projector(shapes, ctx, kProjector.substr(0, kProjector.size() - 1), o.projector,
                                  o.vision.hidden_size, ck.info.text.config.hidden_size, 0.02f);
  std::set<std::string> used;
  for (const ParamInfo& p : shapes.infos()) {
    const std::string hf = hf_llava_vision_name(ck.names, p.name);
    ck.params.push_back({p.name, hf_read_param(st, dir, hf, p)});
    used.insert(hf);
  }
  const HfLlavaNames& names = ck.names;
  for (SafetensorsEntry& e : read_hf_language_params(
           st, ck.info.text, [&names](const std::string& n) { return hf_llava_text_name(names, n); }, used))
    ck.params.push_back(std::move(e));
  const bool tied = !ck.info.text.config.untie_embeddings_and_output_weights;
  for (const std::string& n : st.names())
    MEGADLM_CHECK(used.count(n) || unused_allowed(st, n, names, tied), dir, ": tensor '", n,
                  "' is not used by the llava layout with this config.json");
  return ck;
}

void write_hf_llava_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params,
                               const HfLlavaInfo& info, const HfWriteOptions& opt) {
  hf_check_export_dtype(opt.dtype);
  check_exportable(info);
  const HfLlavaNames names;  // transformers 5's
  std::vector<SafetensorsEntry> vision, language;
  for (const SafetensorsEntry& e : params)
    (starts_with(e.name, kTower) || starts_with(e.name, kProjector) ? vision : language).push_back(e);
  HfExport text = hf_export(language, info.text, opt.dtype);
  const json cfg = llava_config(info, text.config, opt.dtype);
  std::vector<SafetensorsEntry> hf;
  for (const SafetensorsEntry& e : vision) {
    const std::string name = hf_llava_vision_name(names, e.name);
    hf.push_back({name, hf_narrowed(e.tensor, opt.dtype, name)});
  }
  for (SafetensorsEntry& e : text.tensors) hf.push_back({hf_llava_text_name(names, e.name), e.tensor});
  fs::create_directories(dir);
  write_sharded_safetensors(dir, hf, opt.max_shard_bytes, {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

}  // namespace megadlm
