#include "nn/vocab_gather.h"

#include "core/parameters.h"
#include "kernels/backend.h"

namespace megadlm {

Tensor gather_vocab_shards(Arena& arena, const ParallelContext& ctx, const Tensor& local, int64_t V) {
  const int tp = ctx.tp.size;
  if (tp == 1) return local;
  const int64_t N = local.size(0), Vl = local.size(1);
  const Backend& be = backend_of(local);
  // Each rank pads its [N, Vl] to the widest shard's [N, Vw], all_gather gives [tp, N, Vw], and the
  // logits of row n are the tp shards' first columns side by side.
  const int64_t Vw = balanced_rows(V, tp, 0).size;
  Tensor padded = local;
  if (Vl < Vw) {
    padded = arena.tensor({N, Vw});
    be.zero(padded.raw(), padded.nbytes());
    for (int64_t n = 0; n < N; ++n)
      be.copy(padded.data<float>() + n * Vw, local.data<float>() + n * Vl, sizeof(float) * static_cast<size_t>(Vl));
  }
  Tensor chunks = arena.tensor({tp, N, Vw});
  ctx.tp.communicator(be.device()).all_gather(padded.data<float>(), chunks.data<float>(), N * Vw);
  Tensor out = arena.tensor({N, V});
  for (int r = 0; r < tp; ++r) {
    const RowRange rows = balanced_rows(V, tp, r);
    for (int64_t n = 0; n < N; ++n)
      be.copy(out.data<float>() + n * V + rows.begin, chunks.data<float>() + (r * N + n) * Vw,
              sizeof(float) * static_cast<size_t>(rows.size));
  }
  return out;
}

}  // namespace megadlm
