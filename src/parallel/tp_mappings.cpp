#include "parallel/tp_mappings.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace megadlm {

int64_t local_rows(const ParallelContext& ctx, int64_t N) {
  if (!sequence_parallel(ctx)) return N;
  MDLM_CHECK(N % ctx.tp.size == 0, "--sequence-parallel: the micro-batch's ", N,
             " tokens (micro-batch size x sequence length) are not divisible by --tensor-model-parallel-size ",
             ctx.tp.size);
  return N / ctx.tp.size;
}

float* tp_scratch(int64_t n, int slot) {
  // Only the main thread communicates (MPI FUNNELED), so these buffers are never shared between threads.
  static std::vector<float> buffers[4];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

static Tensor gather_into(const ParallelContext& ctx, const Tensor& x, float* out) {
  const int64_t rows = x.size(0), C = x.numel() / rows;
  ctx.tp.communicator().all_gather(x.data<float>(), out, x.numel());
  return Tensor::borrow(out, {rows * ctx.tp.size, C}, DType::F32);
}

Tensor gather_rows(Arena& arena, const ParallelContext& ctx, const Tensor& x) {
  if (!sequence_parallel(ctx)) return x;
  Tensor out = arena.tensor({x.size(0) * ctx.tp.size, x.numel() / x.size(0)});
  gather_into(ctx, x, out.data<float>());
  return out;
}

Tensor gather_rows_scratch(const ParallelContext& ctx, const Tensor& x, int slot) {
  if (!sequence_parallel(ctx)) return x;
  return gather_into(ctx, x, tp_scratch(x.numel() * ctx.tp.size, slot));
}

void reduce_rows(const ParallelContext& ctx, Tensor& partial, Tensor& dx, bool accumulate) {
  const int64_t n = partial.numel();
  float* p = partial.data<float>();
  float* d = dx.data<float>();
  if (sequence_parallel(ctx)) {
    const int64_t local = n / ctx.tp.size;
    MDLM_CHECK(dx.numel() == local, "reduce_rows: ", dx.numel(), " output elements for ", n, " over ", ctx.tp.size,
               " ranks");
    float* out = accumulate ? tp_scratch(local, 3) : d;
    ctx.tp.communicator().reduce_scatter_sum(p, out, local);
    if (accumulate)
      for (int64_t i = 0; i < local; ++i) d[i] += out[i];
    return;
  }
  MDLM_CHECK(dx.numel() == n, "reduce_rows: ", dx.numel(), " output elements for ", n);
  tp_all_reduce_sum(ctx, p, n);
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) d[i] += p[i];
  } else if (p != d) {
    std::copy(p, p + n, d);
  }
}

Tensor reduce_rows(Arena& arena, const ParallelContext& ctx, Tensor& y) {
  if (!sequence_parallel(ctx)) {
    tp_all_reduce_sum(ctx, y.data<float>(), y.numel());
    return y;
  }
  const int64_t rows = local_rows(ctx, y.size(0)), C = y.numel() / y.size(0);
  Tensor out = arena.tensor({rows, C});
  ctx.tp.communicator().reduce_scatter_sum(y.data<float>(), out.data<float>(), out.numel());
  return out;
}

}  // namespace megadlm
