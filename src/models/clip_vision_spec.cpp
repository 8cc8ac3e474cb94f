#include "models/clip_vision_spec.h"

#include "core/error.h"

namespace megadlm {

HostActivation clip_activation_from_name(const std::string& name, const std::string& where) {
  if (name == "quick_gelu") return HostActivation::QuickGelu;
  if (name == "gelu") return HostActivation::GeluErf;
  fail(where, ": hidden_act '", name, "' is not built for CLIP's vision tower (quick_gelu, gelu)");
}

const char* clip_activation_name(HostActivation act) {
  MEGADLM_CHECK(act != HostActivation::None, "CLIP's vision tower needs a host activation (quick_gelu, gelu)");
  return act == HostActivation::QuickGelu ? "quick_gelu" : "gelu";
}

int64_t clip_feature_layers(int64_t num_layers, int64_t feature_layer) {
  MEGADLM_CHECK(feature_layer >= -(num_layers + 1) && feature_layer <= num_layers, "vision_feature_layer ",
                feature_layer, " is outside the ", num_layers + 1, " hidden states of a ", num_layers,
                "-layer tower ([", -(num_layers + 1), ", ", num_layers, "])");
  return feature_layer < 0 ? num_layers + 1 + feature_layer : feature_layer;
}

LayerSpec clip_vision_layer_spec(const ClipVisionOptions& opt) {
  LayerSpec s;
  s.norm = NormSpec{NormKind::LayerNorm, NormPlacement::Pre};
  s.self_attention = SelfAttentionSpec{MaskType::None, 0, false};
  s.mlp = FeedForwardSpec{FeedForwardKind::Dense, Activation::Gelu, opt.activation};
  return s;
}

ModelSpec clip_vision_model_spec(const TransformerConfig& cfg, const ClipVisionOptions& opt) {
  MEGADLM_CHECK(!cfg.moe.enabled(), "CLIP's vision tower is dense only (no --num-experts)");
  MEGADLM_CHECK(cfg.normalization == NormKind::LayerNorm, "CLIP's vision tower needs LayerNorm");
  MEGADLM_CHECK(cfg.position_embedding != PositionEmbedding::Rope, "CLIP's vision tower has learned positions, not RoPE");
  MEGADLM_CHECK(cfg.add_bias_linear, "CLIP's vision tower has biases on every projection");
  MEGADLM_CHECK(!cfg.qk_layernorm, "CLIP's vision tower has no QK LayerNorm");
  MEGADLM_CHECK(cfg.num_query_groups == cfg.num_attention_heads &&
                    cfg.kv_channels * cfg.num_attention_heads == cfg.hidden_size,
                "CLIP's vision tower has hidden / heads channels a head and no grouped-query attention (hidden ",
                cfg.hidden_size, ", heads ", cfg.num_attention_heads, ", groups ", cfg.num_query_groups,
                ", head dim ", cfg.kv_channels, ")");
  MEGADLM_CHECK(opt.activation != HostActivation::None, "CLIP's vision tower needs quick_gelu or gelu");
  MEGADLM_CHECK(opt.patch_size >= 1 && opt.image_size >= opt.patch_size && opt.image_size % opt.patch_size == 0,
                "CLIP's vision tower: image_size ", opt.image_size, " is not a positive multiple of patch_size ",
                opt.patch_size);
  clip_feature_layers(cfg.num_layers, opt.feature_layer);
  ModelSpec m;
  m.embedding = EmbeddingSpec{true, 0, true, true};
  const LayerSpec layer = clip_vision_layer_spec(opt);
  m.stacks.push_back(StackSpec{"encoder.layers", cfg.num_layers, [layer](int64_t) { return layer; }, false,
                               "post_layernorm", NormKind::LayerNorm});
  return m;
}

ProjectorType projector_type_from_name(const std::string& name) {
  if (name == "mlp2x_gelu") return ProjectorType::Mlp2xGelu;
  if (name == "linear") return ProjectorType::Linear;
  fail("--projector-type: unknown value '", name, "' (mlp2x_gelu, linear)");
}

const char* projector_type_name(ProjectorType t) { return t == ProjectorType::Mlp2xGelu ? "mlp2x_gelu" : "linear"; }

}  // namespace megadlm
