#include "models/difflm_spec.h"

#include "core/error.h"

namespace megadlm {

LayerSpec difflm_layer_spec(const TransformerConfig& cfg, MaskType mask, int64_t block_size) {
  MEGADLM_CHECK(mask != MaskType::BlockCausal || block_size > 0,
                "--attention-mask-type block_causal needs --block-length > 0");
  LayerSpec s;
  s.norm = NormSpec{cfg.normalization, NormPlacement::Pre};
  s.self_attention = SelfAttentionSpec{mask, block_size, cfg.qk_layernorm};
  s.mlp = FeedForwardSpec{FeedForwardKind::Dense, cfg.activation};
  return s;
}

ModelSpec difflm_model_spec(const TransformerConfig& cfg) {
  return decoder_model_spec(cfg, difflm_layer_spec(cfg, cfg.attention_mask, cfg.attention_block_size));
}

}  // namespace megadlm
