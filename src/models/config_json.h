#pragma once
// TransformerConfig <-> JSON, for checkpoints and fixtures. Field names are Megatron's argument names.
#include <nlohmann/json.hpp>

#include "nn/transformer_config.h"

namespace megadlm {

nlohmann::json config_to_json(const TransformerConfig& c);
// Throws Error naming `where` and the missing or bad field.
TransformerConfig config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace megadlm
