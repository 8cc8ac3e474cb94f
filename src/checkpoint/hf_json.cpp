#include "checkpoint/hf_json.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "checkpoint/hf_tensor_map.h"
#include "core/file_io.h"

namespace megadlm {

nlohmann::json read_hf_config_json(const std::string& dir) {
  const std::string path = dir + "/config.json";
  MEGADLM_CHECK(std::filesystem::exists(path), dir, ": no config.json (not a HuggingFace checkpoint directory)");
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), ")");
  }
}

std::string hf_architecture(const nlohmann::json& j) {
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    return j["architectures"][0].get<std::string>();
  return "";
}

int64_t hf_size_field(const nlohmann::json& j, const char* key, const std::string& where, const int64_t* dflt) {
  const auto v = hf_field<int64_t>(j, key, where, dflt);
  MEGADLM_CHECK(v >= 1, where, ": config.json field '", key, "' must be at least 1, got ", v);
  return v;
}

float hf_epsilon_field(const nlohmann::json& j, const char* key, const std::string& where, double dflt) {
  const double eps = hf_field<double>(j, key, where, &dflt);
  MEGADLM_CHECK(std::isfinite(eps) && eps > 0, where, ": config.json ", key, " must be positive, got ", eps);
  return static_cast<float>(eps);
}

double hf_decimal(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

void hf_refuse_padded_vocab(const TransformerConfig& c, const char* layout) {
  MEGADLM_CHECK(c.real_vocab_size == 0 || c.real_vocab_size == c.vocab_size, "layout ", layout,
                ": a padded vocabulary (", c.real_vocab_size, " of ", c.vocab_size, ") is not exported");
}

Tensor hf_to_f32(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::F32);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = hf_at(t, false, i, 0, 1);
  return out;
}

Tensor hf_read_param(const ShardedSafetensors& st, const std::string& dir, const std::string& hf, const ParamInfo& p) {
  MEGADLM_CHECK(st.has(hf), dir, ": tensor '", hf, "' (for our ", p.name, ") is missing");
  const Tensor t = st.get(hf);
  MEGADLM_CHECK(t.shape() == p.shape, dir, ": tensor '", hf, "' has shape ", t.shape().str(),
                ", but config.json implies ", p.shape.str());
  return hf_to_f32(t);
}

void hf_check_export_dtype(DType dtype) {
  MEGADLM_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "HuggingFace export dtype ",
                dtype_name(dtype), " is not supported (F32, BF16, F16)");
}

Tensor hf_narrowed(const Tensor& f32, DType dtype, const std::string& name) {
  MEGADLM_CHECK(f32.dtype() == DType::F32, "parameter for '", name, "' is not F32");
  Tensor t = Tensor::empty(f32.shape(), dtype);
  const int64_t n = f32.numel();
  for (int64_t i = 0; i < n; ++i) hf_set(t, false, i, 0, 1, f32.data<float>()[i]);
  return t;
}

bool hf_same_tensor(const ShardedSafetensors& st, const std::string& a, const std::string& b) {
  const Tensor x = hf_to_f32(st.get(a)), y = hf_to_f32(st.get(b));
  return x.shape() == y.shape() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

}  // namespace megadlm
