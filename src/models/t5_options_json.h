#pragma once
// T5Options <-> the "t5" object of a native checkpoint's state.json (HuggingFace's config names:
// num_decoder_layers, relative_attention_num_buckets, relative_attention_max_distance,
// feed_forward_proj, and scale_output). Written by pretrain_difflm --model-type t5 and by
// convert_checkpoint's T5 import; read back by both.
#include <string>

#include <nlohmann/json.hpp>

#include "models/t5_spec.h"

namespace megadlm {

nlohmann::json t5_options_to_json(const T5Options& o);
// Throws Error naming `where` for a missing or malformed key.
T5Options t5_options_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace megadlm
