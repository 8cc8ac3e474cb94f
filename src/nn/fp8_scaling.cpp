#include "nn/fp8_scaling.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

Fp8Format fp8_format_from_name(const std::string& name) {
  if (name == "e4m3") return Fp8Format::E4M3;
  if (name == "hybrid") return Fp8Format::Hybrid;
  fail("--fp8-format: unknown value '", name, "' (expected e4m3 or hybrid)");
}

Fp8AmaxAlgo fp8_amax_algo_from_name(const std::string& name) {
  if (name == "max") return Fp8AmaxAlgo::Max;
  if (name == "most_recent") return Fp8AmaxAlgo::MostRecent;
  fail("--fp8-amax-compute-algo: unknown value '", name, "' (expected max or most_recent)");
}

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "hybrid"; }

float fp8_max(Fp8Kind k) { return k == Fp8Kind::E4M3 ? kE4M3Max : kE5M2Max; }

Fp8TensorScaling::Fp8TensorScaling(Fp8Kind kind, const Fp8Recipe& recipe) : kind_(kind), recipe_(recipe) {
  MEGADLM_CHECK(recipe.amax_history_len >= 1, "--fp8-amax-history-len must be at least 1, got ",
                recipe.amax_history_len);
  ring_.assign(static_cast<size_t>(recipe.amax_history_len), 0.0f);
}

void Fp8TensorScaling::record(float amax) {
  float& slot = ring_[static_cast<size_t>(head_)];
  // NaN poisons the slot on purpose: update() then keeps the previous scale.
  if (std::isnan(amax) || amax > slot) slot = amax;
}

void Fp8TensorScaling::update() {
  const int64_t L = static_cast<int64_t>(ring_.size());
  float amax = ring_[static_cast<size_t>(head_)];
  if (recipe_.amax_algo == Fp8AmaxAlgo::Max)
    for (int64_t i = 0; i < filled_; ++i) {
      const float a = ring_[static_cast<size_t>((head_ - i + L) % L)];
      if (std::isnan(a) || a > amax) amax = a;
    }
  if (std::isfinite(amax) && amax > 0.0f)
    scale_ = static_cast<float>(static_cast<double>(fp8_max(kind_)) / amax / std::ldexp(1.0, recipe_.margin));
  head_ = (head_ + 1) % L;
  ring_[static_cast<size_t>(head_)] = 0.0f;
  filled_ = std::min(filled_ + 1, L);
}

std::vector<float> Fp8TensorScaling::history() const {
  const int64_t L = static_cast<int64_t>(ring_.size());
  std::vector<float> out;
  for (int64_t i = filled_ - 1; i >= 0; --i) out.push_back(ring_[static_cast<size_t>((head_ - i + L) % L)]);
  return out;
}

float fp8_quantize_dequantize(const Backend& be, float* x, int64_t n, Fp8TensorScaling& s) {
  s.record(be.abs_max(x, n));
  const float scale = s.scale();
  be.quantize_dequantize_fp8(x, n, scale, /*e5m2=*/s.kind() == Fp8Kind::E5M2);
  return scale;
}

float fp8_quantize_dequantize(float* x, int64_t n, Fp8TensorScaling& s) {
  return fp8_quantize_dequantize(cpu_backend(), x, n, s);
}

}  // namespace megadlm
