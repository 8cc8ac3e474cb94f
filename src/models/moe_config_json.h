#pragma once
// MoEConfig <-> JSON (the "moe" object of a checkpoint's model config). Keys are Megatron's argument
// names without the leading "moe_" where Megatron has one (num_experts, router_topk, ...).
#include <string>

#include <nlohmann/json.hpp>

#include "nn/moe/moe_config.h"

namespace megadlm {

nlohmann::json moe_config_to_json(const MoEConfig& m);
// Throws Error naming `where` and the bad field.
MoEConfig moe_config_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace megadlm
