#pragma once
// Linear layers, Megatron-style: ColumnParallel splits the output features across tensor-parallel
// ranks, RowParallel splits the input features and all-reduces its output. With tp = 1 both are the
// plain y = x W^T + b; the split and the reductions live here, not in the model code.
// Legend: N tokens (B*T), I input features, O output features. Weight stored [O, I] (PyTorch's layout).
#include <string>

#include "core/arena.h"
#include "nn/parameters.h"
#include "parallel/parallel_context.h"

namespace megadlm {

enum class LinearParallel : uint8_t { Column, Row };

class Linear {
 public:
  Linear() = default;
  Linear(ParamStore& store, const ParallelContext& ctx, const std::string& name, int64_t in_features,
         int64_t out_features, bool bias, float init_std, LinearParallel mode = LinearParallel::Column);

  // x [N, I] -> y [N, O] from the arena. Saves a view of x for the backward.
  Tensor forward(Arena& arena, const Tensor& x);
  // dy [N, O] -> dx [N, I] written (or added to, when accumulate_dx). dW, db accumulated.
  void backward(const Tensor& dy, Tensor& dx, bool accumulate_dx);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int weight_id() const { return w_; }

 private:
  ParamStore* store_ = nullptr;
  const ParallelContext* ctx_ = nullptr;
  LinearParallel mode_ = LinearParallel::Column;
  int64_t in_ = 0, out_ = 0;
  int w_ = -1, b_ = -1;
  Tensor saved_x_;
};

}  // namespace megadlm
