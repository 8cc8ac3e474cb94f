#pragma once
// The autoregressive decoder (MegaDLMs' get_gpt_layer_local_spec): pre-norm layers with causal
// self-attention, the norm, activation and QK-norm of the config, the next-token objective.
#include "models/model_spec.h"

namespace megadlm {

LayerSpec gpt_layer_spec(const TransformerConfig& cfg);
ModelSpec gpt_model_spec(const TransformerConfig& cfg);

}  // namespace megadlm
