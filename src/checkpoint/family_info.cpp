#include "checkpoint/family_info.h"

#include "core/error.h"
#include "models/config_json.h"
#include "models/t5_options_json.h"

namespace megadlm {

const nlohmann::json& family_options(const nlohmann::json& meta, const char* type, const std::string& where) {
  MEGADLM_CHECK(meta.contains("config") && meta.contains(type) && meta[type].is_object(), where, ": a ", type,
                " checkpoint without its config or its \"", type, "\" options");
  return meta[type];
}

namespace {

// BertTrainer's fields: Megatron's BERT (pre-norm, two token types, GELU with the erf, [PAD] 0).
nlohmann::json trained_bert_options(const nlohmann::json& meta) {
  return {{"pre_norm", meta.value("bert_pre_norm", true)}, {"binary_head", meta.value("bert_binary_head", true)}};
}

}  // namespace

HfBertInfo bert_info_of(const nlohmann::json& meta, const std::string& where) {
  const bool trained = !meta.contains("bert") && meta.contains("bert_binary_head");
  const nlohmann::json b = trained ? trained_bert_options(meta) : family_options(meta, "bert", where);
  HfBertInfo info;
  info.config = config_from_json(meta["config"], where);
  try {
    info.options.pre_norm = b.value("pre_norm", false);
    info.options.binary_head = b.value("binary_head", true);
    info.options.token_types = b.value("token_types", int64_t{2});
    info.options.exact_gelu = b.value("exact_gelu", true);
    info.pad_token_id = b.value("pad_token_id", 0);
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": the \"bert\" options are malformed (", e.what(), ")");
  }
  return info;
}

HfT5Info t5_info_of(const nlohmann::json& meta, const std::string& where) {
  const nlohmann::json& t = family_options(meta, "t5", where);
  HfT5Info info;
  info.config = config_from_json(meta["config"], where);
  info.options = t5_options_from_json(t, where);
  try {
    info.pad_token_id = t.value("pad_token_id", 0);
    info.eos_token_id = t.value("eos_token_id", 1);
    info.decoder_start_token_id = t.value("decoder_start_token_id", info.pad_token_id);
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": the \"t5\" options are malformed (", e.what(), ")");
  }
  return info;
}

}  // namespace megadlm
