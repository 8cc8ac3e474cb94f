#pragma once
// Normalisation layers: LayerNorm (weight, optional bias) or RMSNorm (weight), over the last C features.
#include <string>

#include "core/arena.h"
#include "core/parameters.h"
#include "parallel/parallel_context.h"

namespace megadlm {

enum class NormKind : uint8_t { LayerNorm, RMSNorm };
NormKind norm_kind_from_name(const std::string& name);  // "LayerNorm" | "RMSNorm"

class Norm {
 public:
  Norm() = default;
  // ctx: under sequence parallelism (ctx->sequence_parallel, tp > 1) each rank normalises its own
  // rows, so the weight gradients are summed over the tp ranks. Null: a single rank's rows.
  Norm(ParamStore& store, const std::string& name, NormKind kind, int64_t C, float eps, bool bias,
       const ParallelContext* ctx = nullptr);

  // x [N, C] -> y [N, C] from the arena; saves x and the statistics.
  Tensor forward(Arena& arena, const Tensor& x);
  // The same with the output y made in `out_arena` instead: for a caller that keeps only a narrow
  // copy of y (the statistics, which the backward needs, still come from `arena`).
  Tensor forward(Arena& arena, const Tensor& x, Arena& out_arena);
  // dy [N, C] -> dx [N, C] written; parameter gradients accumulated.
  void backward(const Tensor& dy, Tensor& dx);

  NormKind kind() const { return kind_; }

 private:
  ParamStore* store_ = nullptr;
  const ParallelContext* ctx_ = nullptr;
  NormKind kind_ = NormKind::LayerNorm;
  int64_t C_ = 0;
  float eps_ = 1e-5f;
  int w_ = -1, b_ = -1;
  Tensor saved_x_, mean_, rstd_;
};

}  // namespace megadlm
