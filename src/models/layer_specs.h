#pragma once
// Layer specs of the two decoder families, as MegaDLMs' get_gpt_layer_local_spec and
// get_difflm_decoder_block_spec: the same blocks, differing in the attention mask.
#include <string>

#include "nn/layer_spec.h"

namespace megadlm {

enum class ModelType : uint8_t { GPT, DiffLM };
ModelType model_type_from_name(const std::string& name);  // "gpt" | "difflm"
const char* model_type_name(ModelType t);

// Causal attention, next-token objective.
LayerSpec gpt_layer_spec(const TransformerConfig& cfg);
// Bidirectional by default (--attention-mask-type no_mask), or causal / block_causal.
LayerSpec difflm_layer_spec(const TransformerConfig& cfg, MaskType mask, int64_t block_size);

MaskType attention_mask_type_from_name(const std::string& name);  // no_mask | causal | block_causal

}  // namespace megadlm
