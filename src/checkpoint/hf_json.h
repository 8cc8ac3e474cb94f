#pragma once
// Reading and writing the pieces of a HuggingFace directory that every family's converter needs:
// config.json's fields with errors that name the file and the key, the float-to-decimal form of a
// config number, and tensors widened to F32.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors_sharded.h"
#include "core/error.h"
#include "core/parameters.h"
#include "core/tensor.h"
#include "nn/transformer_config.h"

namespace megadlm {

// dir/config.json parsed; an Error naming the file when it is missing or not JSON.
nlohmann::json read_hf_config_json(const std::string& dir);

// architectures[0], or "" when config.json lists none.
std::string hf_architecture(const nlohmann::json& j);

// j[key] as T; a missing or null key gives *dflt, or an Error naming `where` and the key without a
// default; a value of the wrong type is an Error naming it.
template <typename T>
T hf_field(const nlohmann::json& j, const char* key, const std::string& where, const T* dflt = nullptr) {
  if (!j.contains(key) || j[key].is_null()) {
    MEGADLM_CHECK(dflt != nullptr, where, ": config.json lacks '", key, "'");
    return *dflt;
  }
  try {
    return j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(where, ": config.json field '", key, "' has the wrong type (", j[key].dump(), ")");
  }
}

// A size field (at least 1), with an optional default.
int64_t hf_size_field(const nlohmann::json& j, const char* key, const std::string& where,
                      const int64_t* dflt = nullptr);

// A positive finite epsilon.
float hf_epsilon_field(const nlohmann::json& j, const char* key, const std::string& where, double dflt);

// The double whose shortest decimal form is the float's (1e-12f -> 1e-12): config.json holds the
// number that was read, not the float's binary expansion.
double hf_decimal(float f);

// An Error naming the layout for a model with a padded vocabulary (HF configs hold the real one).
void hf_refuse_padded_vocab(const TransformerConfig& c, const char* layout);

// t (F32, BF16 or F16) as an owned F32 tensor; the narrow types widen exactly.
Tensor hf_to_f32(const Tensor& t);

// The parameter `p` of ours from tensor `hf` of st, widened to an owned F32 tensor: an Error naming
// `dir` and the tensor when it is missing or its shape is not p's (as config.json implies it).
Tensor hf_read_param(const ShardedSafetensors& st, const std::string& dir, const std::string& hf, const ParamInfo& p);

// An export's dtype (F32, BF16, F16), else an Error naming it.
void hf_check_export_dtype(DType dtype);
// An F32 tensor (`name` in messages) converted to dtype (F32, BF16, F16), owned.
Tensor hf_narrowed(const Tensor& f32, DType dtype, const std::string& name);

// Whether tensors a and b of st hold the same values (after widening to F32), bit for bit.
bool hf_same_tensor(const ShardedSafetensors& st, const std::string& a, const std::string& b);

}  // namespace megadlm
