#include "parallel/grad_norm.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/optim.h"

namespace megadlm {

double global_grad_norm_sq(const ParamStore& ps, const ParallelContext& ctx, const GradNormOptions& o) {
  const int64_t end = o.end < 0 ? ps.numel() : o.end;
  const float* g = o.grads ? o.grads : ps.grads();
  // [0] dense, [1] expert: experts are summed over one more group (ep) than the rest.
  double sq[2] = {0.0, 0.0};
  if (ps.device() != Device::CPU) {
    // A device run has no tp, pp or ep (train/parallel_training.cpp refuses them), so no parameter is
    // skipped or counted apart: one fixed-order device reduction over the range, one download (the
    // flat buffer's alignment padding holds zero gradients).
    MDLM_CHECK(ctx.tp.size == 1 && ctx.pp.size == 1 && ctx.ep.size == 1 && !o.skip_param,
               "the gradient norm on a device supports data parallelism only");
    sq[0] = backend_for(ps.device()).sum_squares(g + (o.begin - o.grads_offset), end - o.begin);
    if (o.sharded_over_dp && ctx.dp.size > 1) ctx.dp.communicator().all_reduce_sum(sq, 2);  // host doubles
    return sq[0];
  }
  for (const ParamInfo& p : ps.infos()) {
    const int64_t a = std::max(p.offset, o.begin), b = std::min(p.offset + p.shape.numel(), end);
    if (a >= b) continue;
    if (p.split_dim < 0 && ctx.tp.size > 1 && ctx.tp.rank != 0) continue;  // replicated over tp
    if (o.skip_param && o.skip_param(p)) continue;
    sq[p.expert ? 1 : 0] += cpu::sum_squares(g + (a - o.grads_offset), b - a);
  }
  if (o.sharded_over_dp && ctx.dp.size > 1) ctx.dp.communicator().all_reduce_sum(sq, 2);
  if (ctx.tp.size > 1) ctx.tp.communicator().all_reduce_sum(sq, 2);
  if (ctx.pp.size > 1) ctx.pp.communicator().all_reduce_sum(sq, 2);
  if (ctx.ep.size > 1) ctx.ep.communicator().all_reduce_sum(sq + 1, 1);
  return sq[0] + sq[1];
}

}  // namespace megadlm
