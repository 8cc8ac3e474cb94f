#include "models/layer_specs.h"

#include "core/error.h"

namespace megadlm {

ModelType model_type_from_name(const std::string& name) {
  if (name == "gpt") return ModelType::GPT;
  if (name == "difflm") return ModelType::DiffLM;
  fail("--model-type: unknown value '", name, "' (expected difflm or gpt)");
}

const char* model_type_name(ModelType t) { return t == ModelType::GPT ? "gpt" : "difflm"; }

static LayerSpec base_spec(const TransformerConfig& cfg) {
  LayerSpec s;
  s.norm = cfg.normalization;
  s.qk_norm = cfg.qk_layernorm;
  s.activation = cfg.activation;
  s.mlp = MlpKind::Dense;
  return s;
}

LayerSpec gpt_layer_spec(const TransformerConfig& cfg) {
  LayerSpec s = base_spec(cfg);
  s.attention_mask = MaskType::Causal;
  return s;
}

LayerSpec difflm_layer_spec(const TransformerConfig& cfg, MaskType mask, int64_t block_size) {
  LayerSpec s = base_spec(cfg);
  s.attention_mask = mask;
  s.attention_block_size = block_size;
  MEGADLM_CHECK(mask != MaskType::BlockCausal || block_size > 0,
                "--attention-mask-type block_causal needs --block-length > 0");
  return s;
}

MaskType attention_mask_type_from_name(const std::string& name) {
  if (name == "no_mask" || name == "bidirectional") return MaskType::None;
  if (name == "causal") return MaskType::Causal;
  if (name == "block_causal") return MaskType::BlockCausal;
  fail("--attention-mask-type: unknown value '", name, "' (expected no_mask, causal or block_causal)");
}

}  // namespace megadlm
