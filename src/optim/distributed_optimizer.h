#pragma once
// --use-distributed-optimizer (Megatron's ZeRO-1 style): the flat gradient buffer is reduce-scattered
// over the data-parallel group, so dp rank r gets the mean gradient of its shard
// [r * S, (r + 1) * S) of the flat buffer only (S = ceil(numel / dp)); the AdamW moments and the
// update live on that shard alone (the fp32 parameters are the master weights), and the updated
// parameters are all-gathered so that every rank holds the whole model again for the next forward.
// The update of an element is the same arithmetic as AdamW's, so the result equals the plain optimizer
// up to the summation order of the reduction.
//
// Expert parameters are reduced over a different group (edp) than dense ones: with
// --expert-model-parallel-size > 1 this optimizer is refused (not supported yet).
//
// On a device (--device cuda) the shards live there too, the reduce-scatter and all-gather go through
// the dp group's device communicator (NCCL) and the copies through the backend.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "core/parameters.h"
#include "optim/adamw.h"
#include "parallel/parallel_context.h"

namespace megadlm {

class DistributedOptimizer {
 public:
  DistributedOptimizer(ParamStore& params, const AdamWConfig& cfg, const ParallelContext& ctx);

  // After the backward of every micro-batch: the dp mean of this rank's gradient shard.
  void reduce_scatter_grads();
  // Global gradient norm (collective over dp, tp, pp), from the shards; skip_param marks parameters
  // counted on another rank (parallel/grad_norm.h).
  double grad_norm(std::function<bool(const ParamInfo&)> skip_param = nullptr) const;
  // Clips the shard by grad_norm, one AdamW update of the shard, all-gathers the parameters. frozen (or
  // null): the full optimizer's frozen parameters (AdamW::frozen_ids), whose part in the shard stays as it is.
  void apply(double lr, double grad_norm, const std::vector<uint8_t>* frozen = nullptr);

  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }
  const float* shard_grads() const { return g_.data<float>(); }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // Checkpoints keep the single-process format: gather the moment shards into full-size buffers
  // (collective, every dp rank gets them), or take this rank's shard from full-size buffers.
  void gather_state(AdamW& full);
  void scatter_state(AdamW& full);

 private:
  const Backend& backend() const;  // the parameters' device's
  Communicator& dp_comm() const;   // the dp group's communicator for that device
  ParamStore& params_;
  AdamWConfig cfg_;
  ParallelContext ctx_;
  int64_t shard_ = 0;          // S: elements per rank
  int64_t begin_ = 0, end_ = 0;  // this rank's flat range, clipped to numel
  Tensor g_, m_, v_;           // [S] shard gradient and moments
  Tensor staging_;             // [S * dp] when numel is not a multiple of dp (padded_)
  Tensor send_;                // [S] this rank's updated values, the all-gather's input
  bool padded_ = false;
  int64_t step_ = 0;
};

}  // namespace megadlm
