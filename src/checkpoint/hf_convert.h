#pragma once
// HuggingFace checkpoints <-> our parameters. A HuggingFace directory holds config.json, the weights
// (model.safetensors, or shards + model.safetensors.index.json) and tokenizer files. This file reads
// and writes such directories; config.json is translated by hf_config.h, the tensors are mapped by
// hf_tensor_map.h (the supported layouts are listed there). Import and export are exact inverses: a
// round trip reproduces every HF tensor bit for bit in F32, and in BF16 / F16 too (those widen to F32
// exactly).
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_sharded.h"
#include "models/language_model.h"

namespace megadlm {

struct HfCheckpoint {
  HfModelInfo info;
  DType dtype = DType::F32;               // dtype most source tensors were stored in
  std::vector<SafetensorsEntry> params;   // our names, F32 owned tensors, in our registration order
  nlohmann::json raw_config;              // config.json as read
};

// Reads config.json and the weights of `dir` and maps them to our names and shapes. Every parameter
// the config implies must be present, and every tensor in the files must be used (or be a known
// buffer), else an Error naming the tensor.
HfCheckpoint read_hf_checkpoint(const std::string& dir);

// The language model's parameters (our names, F32 owned tensors, in registration order) from the tensors
// of `st` that info.layout maps them to, each HF name passed through hf_name first (a family that nests
// the language model under a prefix: LLaVA's). Every row of a tensor read must be used; the HF names
// read are added to `used`. Errors name st's directory and the tensor.
std::vector<SafetensorsEntry> read_hf_language_params(const ShardedSafetensors& st, const HfModelInfo& info,
                                                     const std::function<std::string(const std::string&)>& hf_name,
                                                     std::set<std::string>& used);

// Copies `params` into a model's parameters by name; every model parameter must be given with its
// shape and no name may be left over (Error naming `where` and the tensor). Any family: LanguageModel,
// BertModel.
void load_params_into(const std::vector<SafetensorsEntry>& params, ParamStore& model, const std::string& where);

// A model's parameters as F32 views (valid while the model lives), in registration order.
std::vector<SafetensorsEntry> model_params(const ParamStore& model);

// Our parameters -> HF tensors in `info.layout`, converted to dtype (F32, BF16 or F16).
std::vector<SafetensorsEntry> params_to_hf(const std::vector<SafetensorsEntry>& params, const HfModelInfo& info,
                                           DType dtype);

struct HfWriteOptions {
  DType dtype = DType::F32;
  int64_t max_shard_bytes = 0;  // <= 0: one file
};
// What an export writes: config.json and the HF tensors (owned, in the export dtype). A model with a
// padded vocabulary (info.config.real_vocab_size) is exported without the padded rows, vocab_size =
// real_vocab_size.
struct HfExport {
  nlohmann::json config;
  std::vector<SafetensorsEntry> tensors;
};
HfExport hf_export(const std::vector<SafetensorsEntry>& params, const HfModelInfo& info, DType dtype);
// Writes hf_export's config.json and weights (atomic files) into dir.
void write_hf_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params, const HfModelInfo& info,
                         const HfWriteOptions& opt);

// Tokenizer files carried between HF directories and native checkpoints.
extern const char* const kHfTokenizerFiles[];  // null-terminated list: tokenizer.json, tokenizer_config.json, ...

}  // namespace megadlm
