#pragma once
// Normalisation layers: LayerNorm (weight, optional bias) or RMSNorm (weight), over the last C features.
#include <string>

#include "core/arena.h"
#include "nn/parameters.h"

namespace megadlm {

enum class NormKind : uint8_t { LayerNorm, RMSNorm };
NormKind norm_kind_from_name(const std::string& name);  // "LayerNorm" | "RMSNorm"

class Norm {
 public:
  Norm() = default;
  Norm(ParamStore& store, const std::string& name, NormKind kind, int64_t C, float eps, bool bias);

  // x [N, C] -> y [N, C] from the arena; saves x and the statistics.
  Tensor forward(Arena& arena, const Tensor& x);
  // dy [N, C] -> dx [N, C] written; parameter gradients accumulated.
  void backward(const Tensor& dy, Tensor& dx);

  NormKind kind() const { return kind_; }

 private:
  ParamStore* store_ = nullptr;
  NormKind kind_ = NormKind::LayerNorm;
  int64_t C_ = 0;
  float eps_ = 1e-5f;
  int w_ = -1, b_ = -1;
  Tensor saved_x_, mean_, rstd_;
};

}  // namespace megadlm
