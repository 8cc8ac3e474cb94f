#include "optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "parallel/grad_norm.h"

namespace megadlm {

DistributedOptimizer::DistributedOptimizer(ParamStore& params, const AdamWConfig& cfg, const ParallelContext& ctx)
    : params_(params), cfg_(cfg), ctx_(ctx) {
  MEGADLM_CHECK(ctx.ep.size == 1, "--use-distributed-optimizer with --expert-model-parallel-size ", ctx.ep.size,
                " is not supported yet");
  const int64_t n = params.numel();
  const int dp = ctx.dp.size;
  shard_ = (n + dp - 1) / dp;
  begin_ = std::min<int64_t>(n, shard_ * ctx.dp.rank);
  end_ = std::min<int64_t>(n, begin_ + shard_);
  // The shards live where the parameters do; on a device the collectives take the dp group's device
  // communicator (NCCL) and the copies the backend.
  const Device d = params.device();
  g_ = Tensor::zeros({shard_}, DType::F32, d);
  m_ = Tensor::zeros({shard_}, DType::F32, d);
  send_ = Tensor::zeros({shard_}, DType::F32, d);
  v_ = Tensor::zeros({shard_}, DType::F32, d);
  padded_ = shard_ * dp != n;
  if (padded_) staging_ = Tensor::zeros({shard_ * dp}, DType::F32, d);
}

const Backend& DistributedOptimizer::backend() const { return backend_for(params_.device()); }
Communicator& DistributedOptimizer::dp_comm() const { return ctx_.dp.communicator(params_.device()); }

void DistributedOptimizer::reduce_scatter_grads() {
  const int64_t n = params_.numel();
  const float* in = params_.grads();
  if (padded_) {
    // The staging tail beyond numel stays zero from construction (nothing else writes it).
    backend().copy(staging_.data<float>(), in, static_cast<size_t>(n) * sizeof(float));
    in = staging_.data<float>();
  }
  dp_comm().reduce_scatter_sum(in, g_.data<float>(), shard_);
  backend().scale_inplace(g_.data<float>(), 1.0f / static_cast<float>(ctx_.dp.size), shard_);
}

double DistributedOptimizer::grad_norm(std::function<bool(const ParamInfo&)> skip_param) const {
  GradNormOptions o;
  o.skip_param = std::move(skip_param);
  o.begin = begin_;
  o.end = end_;
  o.grads = g_.data<float>();
  o.grads_offset = begin_;
  o.sharded_over_dp = true;
  return std::sqrt(global_grad_norm_sq(params_, ctx_, o));
}

void DistributedOptimizer::apply(double lr, double norm, const std::vector<uint8_t>* frozen) {
  ++step_;
  adamw_update_range(params_, cfg_, lr, norm, step_, begin_, end_, g_.data<float>(), m_.data<float>(),
                     v_.data<float>(), nullptr, false, frozen);
  // Every rank needs the whole updated model: all-gather the shards.
  const int64_t n = params_.numel();
  float* out = padded_ ? staging_.data<float>() : params_.values();
  // The input is this rank's shard of the values; copied out first since out may alias it (the
  // copy's tail beyond end_, for the last rank of a padded buffer, stays zero).
  float* mine = send_.data<float>();
  if (end_ > begin_) backend().copy(mine, params_.values() + begin_, static_cast<size_t>(end_ - begin_) * sizeof(float));
  dp_comm().all_gather(mine, out, shard_);
  if (padded_) backend().copy(params_.values(), out, static_cast<size_t>(n) * sizeof(float));
}

void DistributedOptimizer::gather_state(AdamW& full) {
  const int64_t n = params_.numel();
  Tensor buf = Tensor::empty({shard_ * ctx_.dp.size}, DType::F32, params_.device());
  for (int which = 0; which < 2; ++which) {
    const Tensor& mine = which == 0 ? m_ : v_;
    Tensor& dst = which == 0 ? full.exp_avg() : full.exp_avg_sq();
    MEGADLM_CHECK(dst.device() == params_.device(), "gather_state: the full AdamW state is on another device");
    dp_comm().all_gather(mine.data<float>(), buf.data<float>(), shard_);
    backend().copy(dst.data<float>(), buf.data<float>(), static_cast<size_t>(n) * sizeof(float));
  }
  full.set_steps_taken(step_);
}

void DistributedOptimizer::scatter_state(AdamW& full) {
  for (int which = 0; which < 2; ++which) {
    Tensor& mine = which == 0 ? m_ : v_;
    const Tensor& src = which == 0 ? full.exp_avg() : full.exp_avg_sq();
    MEGADLM_CHECK(src.device() == params_.device(), "scatter_state: the full AdamW state is on another device");
    backend().zero(mine.data<float>(), static_cast<size_t>(shard_) * sizeof(float));
    if (end_ > begin_)
      backend().copy(mine.data<float>(), src.data<float>() + begin_, static_cast<size_t>(end_ - begin_) * sizeof(float));
  }
  step_ = full.steps_taken();
}

}  // namespace megadlm
