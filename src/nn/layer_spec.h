#pragma once
// A transformer layer is assembled from a spec, as in Megatron-core's ModuleSpec: which norm, which
// attention mask, which MLP (dense now; MoE plugs in here). Model builders in models/ produce specs
// (gpt_layer_spec, difflm_layer_spec); TransformerLayer only follows them.
#include "nn/transformer_config.h"

namespace megadlm {

enum class MlpKind : uint8_t { Dense, MoE };

struct LayerSpec {
  NormKind norm = NormKind::LayerNorm;
  MaskType attention_mask = MaskType::Causal;
  int64_t attention_block_size = 0;
  bool qk_norm = false;
  MlpKind mlp = MlpKind::Dense;
  Activation activation = Activation::Gelu;
};

}  // namespace megadlm
