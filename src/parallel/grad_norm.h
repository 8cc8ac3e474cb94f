#pragma once
// The global gradient norm for clipping, whatever the layout: the sum of squares of every gradient
// element of the FULL model counted exactly once, reduced over the groups across which the model is
// split, so every rank gets the same norm as a single process (up to summation order).
//   - tensor-parallel shards (ParamInfo.split_dim >= 0) are distinct: summed over tp; parameters
//     replicated over tp (norms, biases of row-parallel layers) count on tp rank 0 only;
//   - pipeline stages hold distinct layers: summed over pp (a parameter held by two stages, like
//     tied embeddings on the first and last stage, must be marked by its owner: pass skip_param);
//   - expert parameters (ParamInfo.expert) of different ep ranks are different experts: summed over ep;
//   - data-parallel replicas are identical after the gradient all-reduce: counted once, unless the
//     gradients are sharded over dp (distributed optimizer), then each rank's shard is summed over dp.
#include <cstdint>
#include <functional>

#include "core/parameters.h"
#include "parallel/parallel_context.h"

namespace megadlm {

struct GradNormOptions {
  // Only elements [begin, end) of the flat gradient buffer (end < 0: all), read from `grads` (null:
  // params.grads()) at the same offsets minus `grads_offset`: the distributed optimizer's shard.
  int64_t begin = 0, end = -1;
  const float* grads = nullptr;
  int64_t grads_offset = 0;
  bool sharded_over_dp = false;  // each dp rank holds a different [begin, end): sum over dp
  std::function<bool(const ParamInfo&)> skip_param;  // true: not counted on this rank (a duplicate)
};

// Collective over tp, pp, ep (and dp when sharded_over_dp): every rank of those groups must call it.
double global_grad_norm_sq(const ParamStore& params, const ParallelContext& ctx, const GradNormOptions& opt = {});

}  // namespace megadlm
