#pragma once
// The BERT and T5 models of native checkpoints, rebuilt from state.json alone: the config and the
// family's options (the "bert" / "t5" object that convert_checkpoint and T5Trainer write; a BertTrainer
// checkpoint records its options as bert_pre_norm and bert_binary_head beside the config).
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_bert.h"
#include "checkpoint/hf_t5.h"

namespace megadlm {

// meta[type], an Error naming `where` when it or the config is absent.
const nlohmann::json& family_options(const nlohmann::json& meta, const char* type, const std::string& where);

HfBertInfo bert_info_of(const nlohmann::json& meta, const std::string& where);
HfT5Info t5_info_of(const nlohmann::json& meta, const std::string& where);

}  // namespace megadlm
