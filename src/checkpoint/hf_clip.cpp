#include "checkpoint/hf_clip.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/hf_json.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/error.h"
#include "core/file_io.h"

namespace megadlm {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

bool is_clip_model(const json& j) {
  return j.is_object() && ((j.contains("model_type") && j["model_type"] == "clip") || hf_architecture(j) == "CLIPModel");
}

// The tensors a file may hold besides the tower's parameters: the position ids buffer, and a CLIPModel's
// text tower and projections.
bool unused_allowed(const std::string& n, const std::string& prefix, bool clip_model) {
  if (n == prefix + "embeddings.position_ids") return true;
  return clip_model && (starts_with(n, "text_model.") || n == "text_projection.weight" ||
                        n == "visual_projection.weight" || n == "logit_scale");
}

}  // namespace

bool is_hf_clip_vision_config(const json& j) {
  if (!j.is_object()) return false;
  return (j.contains("model_type") && j["model_type"] == "clip_vision_model") ||
         hf_architecture(j) == "CLIPVisionModel" || is_clip_model(j);
}

HfClipVisionInfo hf_clip_vision_config_to_info(const json& top, const std::string& where) {
  MEGADLM_CHECK(top.is_object(), where, ": config.json is not a JSON object");
  const bool clip_model = is_clip_model(top);
  MEGADLM_CHECK(!clip_model || (top.contains("vision_config") && top["vision_config"].is_object()), where,
                ": a CLIPModel config.json without a vision_config object");
  const json& j = clip_model ? top["vision_config"] : top;
  const std::string at = clip_model ? where + " (vision_config)" : where;
  HfClipVisionInfo info;
  info.prefix = "vision_model.";
  // CLIPVisionConfig's defaults (ViT-B/32) where a key is absent, as transformers reads it.
  const int64_t d_hidden = 768, d_inter = 3072, d_layers = 12, d_heads = 12, d_image = 224, d_patch = 32, d_ch = 3;
  TransformerConfig& c = info.config;
  c.hidden_size = hf_size_field(j, "hidden_size", at, &d_hidden);
  c.ffn_hidden_size = hf_size_field(j, "intermediate_size", at, &d_inter);
  c.num_layers = hf_size_field(j, "num_hidden_layers", at, &d_layers);
  c.num_attention_heads = hf_size_field(j, "num_attention_heads", at, &d_heads);
  MEGADLM_CHECK(c.hidden_size % c.num_attention_heads == 0, at, ": config.json hidden_size ", c.hidden_size,
                " is not a multiple of num_attention_heads ", c.num_attention_heads);
  c.num_query_groups = c.num_attention_heads;
  c.kv_channels = c.hidden_size / c.num_attention_heads;
  const int64_t channels = hf_size_field(j, "num_channels", at, &d_ch);
  MEGADLM_CHECK(channels == 3, at, ": config.json num_channels ", channels, " is not built (3 only: RGB)");
  ClipVisionOptions& o = info.options;
  o.image_size = hf_size_field(j, "image_size", at, &d_image);
  o.patch_size = hf_size_field(j, "patch_size", at, &d_patch);
  MEGADLM_CHECK(o.image_size % o.patch_size == 0, at, ": config.json image_size ", o.image_size,
                " is not a multiple of patch_size ", o.patch_size);
  const std::string quick = "quick_gelu";
  o.activation = clip_activation_from_name(hf_field<std::string>(j, "hidden_act", at, &quick), at);
  c.norm_epsilon = hf_epsilon_field(j, "layer_norm_eps", at, 1e-5);
  const double std_default = 0.02;
  c.init_method_std = static_cast<float>(hf_field<double>(j, "initializer_range", at, &std_default));
  c.max_position_embeddings = (o.image_size / o.patch_size) * (o.image_size / o.patch_size) + 1;
  c.normalization = NormKind::LayerNorm;
  c.activation = Activation::Gelu;
  c.add_bias_linear = true;
  c.position_embedding = PositionEmbedding::LearnedAbsolute;
  c.attention_mask = MaskType::None;
  return info;
}

json hf_clip_vision_config_from_info(const HfClipVisionInfo& info, DType dtype) {
  const TransformerConfig& c = info.config;
  clip_vision_model_spec(c, info.options);  // refuses what CLIP's tower is not
  json j;
  j["architectures"] = {"CLIPVisionModel"};
  j["model_type"] = "clip_vision_model";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.ffn_hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["image_size"] = info.options.image_size;
  j["patch_size"] = info.options.patch_size;
  j["num_channels"] = 3;
  j["hidden_act"] = clip_activation_name(info.options.activation);
  j["layer_norm_eps"] = hf_decimal(c.norm_epsilon);
  j["initializer_range"] = hf_decimal(c.init_method_std);
  j["attention_dropout"] = 0.0;
  j["dtype"] = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  return j;
}

std::string hf_clip_vision_name(const std::string& ours) {
  if (starts_with(ours, "embeddings.") || starts_with(ours, "pre_layrnorm.") || starts_with(ours, "post_layernorm."))
    return ours;
  const std::string layers = "encoder.layers.";
  if (starts_with(ours, layers)) {
    const size_t dot = ours.find('.', layers.size());
    if (dot != std::string::npos) {
      const std::string head = ours.substr(0, dot + 1), rest = ours.substr(dot + 1);
      const std::pair<const char*, const char*> map[] = {
          {"input_layernorm.", "layer_norm1."},        {"post_attention_layernorm.", "layer_norm2."},
          {"self_attn.q_proj.", "self_attn.q_proj."},  {"self_attn.k_proj.", "self_attn.k_proj."},
          {"self_attn.v_proj.", "self_attn.v_proj."},  {"self_attn.o_proj.", "self_attn.out_proj."},
          {"mlp.fc1.", "mlp.fc1."},                    {"mlp.fc2.", "mlp.fc2."}};
      for (const auto& [a, b] : map)
        if (starts_with(rest, a)) return head + b + rest.substr(std::strlen(a));
    }
  }
  fail("layout clip_vision: parameter '", ours, "' has no HuggingFace counterpart");
}

HfClipVisionCheckpoint read_hf_clip_vision_checkpoint(const std::string& dir) {
  HfClipVisionCheckpoint ck;
  const json cfg = read_hf_config_json(dir);
  ck.info = hf_clip_vision_config_to_info(cfg, dir + "/config.json");
  const ClipVisionModel shapes(ck.info.config, ck.info.options, ParallelContext::single());
  ShardedSafetensors st(dir);
  ck.dtype = st.dominant_dtype();
  // The prefix: transformers 5's CLIPVisionModel writes none, transformers 4 and CLIPModel "vision_model.".
  ck.info.prefix = st.has("embeddings.class_embedding") ? "" : "vision_model.";
  std::set<std::string> used;
  for (const ParamInfo& p : shapes.params().infos()) {
    const std::string hf = ck.info.prefix + hf_clip_vision_name(p.name);
    ck.params.push_back({p.name, hf_read_param(st, dir, hf, p)});
    used.insert(hf);
  }
  const bool clip_model = is_clip_model(cfg);
  for (const std::string& n : st.names())
    MEGADLM_CHECK(used.count(n) || unused_allowed(n, ck.info.prefix, clip_model), dir, ": tensor '", n,
                  "' is not used by the clip_vision layout with this config.json");
  return ck;
}

void write_hf_clip_vision_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params,
                                     const HfClipVisionInfo& info, const HfWriteOptions& opt) {
  hf_check_export_dtype(opt.dtype);
  const json cfg = hf_clip_vision_config_from_info(info, opt.dtype);
  std::vector<SafetensorsEntry> hf;
  for (const SafetensorsEntry& e : params) {
    const std::string name = info.prefix + hf_clip_vision_name(e.name);
    hf.push_back({name, hf_narrowed(e.tensor, opt.dtype, name)});
  }
  fs::create_directories(dir);
  write_sharded_safetensors(dir, hf, opt.max_shard_bytes, {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
}

}  // namespace megadlm
