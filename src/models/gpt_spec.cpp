#include "models/gpt_spec.h"

namespace megadlm {

LayerSpec gpt_layer_spec(const TransformerConfig& cfg) {
  LayerSpec s;
  s.norm = NormSpec{cfg.normalization, NormPlacement::Pre};
  s.self_attention = SelfAttentionSpec{MaskType::Causal, 0, cfg.qk_layernorm};
  s.mlp = FeedForwardSpec{FeedForwardKind::Dense, cfg.activation};
  return s;
}

ModelSpec gpt_model_spec(const TransformerConfig& cfg) { return decoder_model_spec(cfg, gpt_layer_spec(cfg)); }

}  // namespace megadlm
