#include "parallel/grad_norm.h"

#include <algorithm>

#include "kernels/backend.h"

namespace megadlm {

double global_grad_norm_sq(const ParamStore& ps, const ParallelContext& ctx, const GradNormOptions& o) {
  const int64_t end = o.end < 0 ? ps.numel() : o.end;
  const float* g = o.grads ? o.grads : ps.grads();
  // [0] dense, [1] expert: experts are summed over one more group (ep) than the rest.
  double sq[2] = {0.0, 0.0};
  if (ps.device() != Device::CPU && !o.skip_param && ctx.tp.size == 1 && ctx.ep.size == 1) {
    // On a device with nothing to skip or count apart: one fixed-order device reduction over the
    // range, one download (the flat buffer's alignment padding holds zero gradients).
    sq[0] = backend_for(ps.device()).sum_squares(g + (o.begin - o.grads_offset), end - o.begin);
  } else {
    // Per parameter (on a device, one reduction and download each).
    const Backend& be = backend_for(ps.device());
    for (const ParamInfo& p : ps.infos()) {
      const int64_t a = std::max(p.offset, o.begin), b = std::min(p.offset + p.shape.numel(), end);
      if (a >= b) continue;
      if (p.split_dim < 0 && ctx.tp.size > 1 && ctx.tp.rank != 0) continue;  // replicated over tp
      if (o.skip_param && o.skip_param(p)) continue;
      sq[p.expert ? 1 : 0] += be.sum_squares(g + (a - o.grads_offset), b - a);
    }
  }
  // The partial sums are host doubles: the groups' host communicators add them.
  if (o.sharded_over_dp && ctx.dp.size > 1) ctx.dp.communicator().all_reduce_sum(sq, 2);
  if (ctx.tp.size > 1) ctx.tp.communicator().all_reduce_sum(sq, 2);
  if (ctx.pp.size > 1) ctx.pp.communicator().all_reduce_sum(sq, 2);
  if (ctx.ep.size > 1) ctx.ep.communicator().all_reduce_sum(sq + 1, 1);
  return sq[0] + sq[1];
}

}  // namespace megadlm
