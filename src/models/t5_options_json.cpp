#include "models/t5_options_json.h"

#include "core/error.h"

namespace megadlm {

nlohmann::json t5_options_to_json(const T5Options& o) {
  return {{"num_decoder_layers", o.num_decoder_layers},
          {"relative_attention_num_buckets", o.relative_attention_num_buckets},
          {"relative_attention_max_distance", o.relative_attention_max_distance},
          {"feed_forward_proj", t5_feed_forward_name(o.feed_forward)},
          {"scale_output", o.scale_output}};
}

T5Options t5_options_from_json(const nlohmann::json& j, const std::string& where) {
  T5Options o;
  try {
    o.num_decoder_layers = j.at("num_decoder_layers").get<int64_t>();
    o.relative_attention_num_buckets = j.at("relative_attention_num_buckets").get<int64_t>();
    o.relative_attention_max_distance = j.at("relative_attention_max_distance").get<int64_t>();
    o.feed_forward = t5_feed_forward_from_name(j.at("feed_forward_proj").get<std::string>(), where);
    o.scale_output = j.at("scale_output").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": the \"t5\" options are malformed (", e.what(), ")");
  }
  return o;
}

}  // namespace megadlm
