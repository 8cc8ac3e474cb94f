#include "optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/optim.h"
#include "parallel/grad_norm.h"

namespace megadlm {

DistributedOptimizer::DistributedOptimizer(ParamStore& params, const AdamWConfig& cfg, const ParallelContext& ctx)
    : params_(params), cfg_(cfg), ctx_(ctx) {
  MDLM_CHECK(ctx.ep.size == 1, "--use-distributed-optimizer with --expert-model-parallel-size ", ctx.ep.size,
             " is not supported yet");
  const int64_t n = params.numel();
  const int dp = ctx.dp.size;
  shard_ = (n + dp - 1) / dp;
  begin_ = std::min<int64_t>(n, shard_ * ctx.dp.rank);
  end_ = std::min<int64_t>(n, begin_ + shard_);
  g_ = Tensor::zeros({shard_}, DType::F32);
  m_ = Tensor::zeros({shard_}, DType::F32);
  v_ = Tensor::zeros({shard_}, DType::F32);
  padded_ = shard_ * dp != n;
  if (padded_) staging_ = Tensor::zeros({shard_ * dp}, DType::F32);
}

void DistributedOptimizer::reduce_scatter_grads() {
  const int64_t n = params_.numel();
  const float* in = params_.grads();
  if (padded_) {
    std::memcpy(staging_.data<float>(), in, static_cast<size_t>(n) * sizeof(float));
    std::memset(staging_.data<float>() + n, 0, static_cast<size_t>(staging_.numel() - n) * sizeof(float));
    in = staging_.data<float>();
  }
  ctx_.dp.communicator().reduce_scatter_sum(in, g_.data<float>(), shard_);
  cpu::scale_inplace(g_.data<float>(), 1.0f / static_cast<float>(ctx_.dp.size), shard_);
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

void DistributedOptimizer::apply(double lr, double norm) {
  float* g = g_.data<float>();
  if (cfg_.clip_grad > 0 && norm > cfg_.clip_grad)
    cpu::scale_inplace(g, static_cast<float>(cfg_.clip_grad / (norm + 1e-6)), shard_);
  ++step_;
  cpu::AdamWParams h;
  h.lr = static_cast<float>(lr);
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.step = step_;
  // Weight decay is per parameter: update the shard parameter by parameter (a parameter may straddle
  // two shards; each rank updates its part). Alignment padding between parameters is not updated.
  for (const ParamInfo& p : params_.infos()) {
    const int64_t a = std::max(p.offset, begin_), b = std::min(p.offset + p.shape.numel(), end_);
    if (a >= b) continue;
    h.weight_decay = p.weight_decay ? cfg_.weight_decay : 0.0f;
    cpu::adamw_step(params_.values() + a, g + (a - begin_), m_.data<float>() + (a - begin_),
                    v_.data<float>() + (a - begin_), b - a, h);
  }
  // Every rank needs the whole updated model: all-gather the shards.
  const int64_t n = params_.numel();
  float* out = padded_ ? staging_.data<float>() : params_.values();
  // The input is this rank's shard of the values; copy it out first since out may alias it.
  std::vector<float> mine(static_cast<size_t>(shard_), 0.0f);
  std::copy(params_.values() + begin_, params_.values() + end_, mine.begin());
  ctx_.dp.communicator().all_gather(mine.data(), out, shard_);
  if (padded_) std::memcpy(params_.values(), out, static_cast<size_t>(n) * sizeof(float));
}

void DistributedOptimizer::gather_state(AdamW& full) {
  const int64_t n = params_.numel();
  std::vector<float> buf(static_cast<size_t>(shard_ * ctx_.dp.size));
  for (int which = 0; which < 2; ++which) {
    const Tensor& mine = which == 0 ? m_ : v_;
    Tensor& dst = which == 0 ? full.exp_avg() : full.exp_avg_sq();
    ctx_.dp.communicator().all_gather(mine.data<float>(), buf.data(), shard_);
    std::memcpy(dst.data<float>(), buf.data(), static_cast<size_t>(n) * sizeof(float));
  }
  full.set_steps_taken(step_);
}

void DistributedOptimizer::scatter_state(AdamW& full) {
  for (int which = 0; which < 2; ++which) {
    Tensor& mine = which == 0 ? m_ : v_;
    const Tensor& src = which == 0 ? full.exp_avg() : full.exp_avg_sq();
    mine.zero_();
    std::memcpy(mine.data<float>(), src.data<float>() + begin_, static_cast<size_t>(end_ - begin_) * sizeof(float));
  }
  step_ = full.steps_taken();
}

}  // namespace megadlm
