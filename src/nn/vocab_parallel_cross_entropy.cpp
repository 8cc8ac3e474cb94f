#include "nn/vocab_parallel_cross_entropy.h"

#include "core/error.h"
#include "core/parameters.h"

namespace megadlm {

// Host targets only: in [0, V) or ignore_index.
static void check_targets(const CrossEntropyArgs& a) {
  for (int64_t n = 0; n < a.N; ++n) {
    const int64_t t = a.targets[n];
    MEGADLM_CHECK(t == a.ignore_index || (t >= 0 && t < a.V), "cross_entropy: targets[", n, "] = ", t,
                  " is outside the vocabulary [0, ", a.V, ") and is not ignore_index (", a.ignore_index, ")");
  }
}

double vocab_parallel_cross_entropy(const Backend& be, Arena& arena, const ParallelContext& ctx,
                                    const CrossEntropyArgs& a) {
  const RowRange cols = balanced_rows(a.V, ctx.tp.size, ctx.tp.rank);
  MEGADLM_CHECK(a.Vl == cols.size && a.vocab_start == cols.begin, "vocab-parallel cross-entropy: columns [",
                a.vocab_start, ", ", a.vocab_start + a.Vl, ") on tp rank ", ctx.tp.rank, " of ", ctx.tp.size,
                " are not its share [", cols.begin, ", ", cols.begin + cols.size, ") of the vocabulary ", a.V);
  // One pass over the whole vocabulary; bf16 logits only where the bf16 gradient is wanted (their
  // forward-only loss takes the pieces, which need no gradient buffer).
  if (ctx.tp.size == 1 && (!a.logits_bf16 || a.dlogits_bf16 != nullptr)) return be.cross_entropy(a);
  if (be.device() == Device::CPU) check_targets(a);
  // The three pieces, the row maxima all-reduced (max) between the first two and the statistics
  // (sum, in double so that the total does not depend on the split) between the last two.
  const size_t mark = arena.mark();
  float* row_max = static_cast<float*>(arena.allocate(sizeof(float) * static_cast<size_t>(a.N)));
  double* stats = static_cast<double*>(arena.allocate(sizeof(double) * 2 * static_cast<size_t>(a.N)));
  Communicator& comm = ctx.tp.communicator(be.device());
  const bool reduce = ctx.tp.size > 1;
  be.cross_entropy_shard_max(row_max, a);
  if (reduce) comm.all_reduce_max(row_max, a.N);
  be.cross_entropy_shard_sumexp(stats, row_max, a);
  if (reduce) comm.all_reduce_sum(stats, 2 * a.N);
  const double total = be.cross_entropy_shard_finish(stats, row_max, a);
  arena.release(mark);
  return total;
}

}  // namespace megadlm
