#pragma once
// The masked diffusion decoder (MegaDLMs' get_difflm_decoder_block_spec): the GPT layers with the
// attention mask of --attention-mask-type, bidirectional by default (or causal, or block-causal with
// --block-length), and the masked diffusion objective.
#include "models/model_spec.h"

namespace megadlm {

// Throws an Error naming --block-length when a block-causal mask has no block size.
LayerSpec difflm_layer_spec(const TransformerConfig& cfg, MaskType mask, int64_t block_size);
// With the config's mask (cfg.attention_mask, cfg.attention_block_size).
ModelSpec difflm_model_spec(const TransformerConfig& cfg);

}  // namespace megadlm
