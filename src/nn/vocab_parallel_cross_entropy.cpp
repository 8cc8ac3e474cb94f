#include "nn/vocab_parallel_cross_entropy.h"

#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/cross_entropy.h"

namespace megadlm {

static void check_split(const ParallelContext& ctx, int64_t Vl, int64_t V) {
  MEGADLM_CHECK(Vl * ctx.tp.size == V, "vocab-parallel cross-entropy: ", Vl, " columns per rank x ", ctx.tp.size,
                " ranks is not the vocabulary size ", V);
}

static void check_shards(const ParallelContext& ctx, const int32_t* targets, int64_t ignore_index, int64_t N,
                         int64_t Vl, int64_t V) {
  check_split(ctx, Vl, V);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    MEGADLM_CHECK(t == ignore_index || (t >= 0 && t < V), "cross_entropy: targets[", n, "] = ", t,
                  " is outside the vocabulary [0, ", V, ") and is not ignore_index (", ignore_index, ")");
  }
}

// The three pieces across the tp ranks, on row_max [N] and stats [2N] on the pieces' device:
// max(row_max) = the row maxima, all-reduced (max); sumexp(row_max, stats) = per row [sum of exp,
// target logit], all-reduced (sum, in double so that the total does not depend on the split); then
// finish(row_max, stats) gives the loss. comm: the tp group's communicator for that device; on one
// rank the reductions are skipped.
template <class Max, class SumExp, class Finish>
static double reduce_pieces(Communicator& comm, bool reduce, float* row_max, double* stats, int64_t N, Max max,
                            SumExp sumexp, Finish finish) {
  max(row_max);
  if (reduce) comm.all_reduce_max(row_max, N);
  sumexp(row_max, stats);
  if (reduce) comm.all_reduce_sum(stats, 2 * N);
  return finish(row_max, stats);
}

// The same on the host: the targets checked, the statistics in host vectors.
template <class Max, class SumExp, class Finish>
static double across_shards(const ParallelContext& ctx, const int32_t* targets, int64_t ignore_index, int64_t N,
                            int64_t Vl, int64_t V, Max max, SumExp sumexp, Finish finish) {
  check_shards(ctx, targets, ignore_index, N, Vl, V);
  std::vector<float> row_max(N);
  std::vector<double> stats(2 * N);
  return reduce_pieces(ctx.tp.communicator(), ctx.tp.size > 1, row_max.data(), stats.data(), N, max, sumexp,
                       finish);
}

double vocab_parallel_cross_entropy(const ParallelContext& ctx, float* losses, float* dlogits, const float* logits,
                                    const int32_t* targets, const float* weights, int64_t ignore_index,
                                    float grad_scale, int64_t N, int64_t Vl, int64_t vocab_start, int64_t V,
                                    uint16_t* dlogits_bf16) {
  MEGADLM_CHECK(dlogits_bf16 == nullptr || dlogits != nullptr,
                "vocab-parallel cross-entropy: a bf16 gradient needs the fp32 buffer too");
  if (ctx.tp.size == 1) {
    if (dlogits_bf16)
      return cpu::cross_entropy_forward_backward_bf16(losses, dlogits_bf16, logits, targets, weights, ignore_index,
                                                      grad_scale, N, Vl);
    return cpu::cross_entropy_forward_backward(losses, dlogits, logits, targets, weights, ignore_index, grad_scale,
                                               N, Vl);
  }
  return across_shards(
      ctx, targets, ignore_index, N, Vl, V,
      [&](float* row_max) { cpu::cross_entropy_shard_max(row_max, logits, targets, ignore_index, N, Vl); },
      [&](const float* row_max, double* stats) {
        cpu::cross_entropy_shard_sumexp(stats, dlogits, logits, row_max, targets, ignore_index, vocab_start, N, Vl);
      },
      [&](const float* row_max, const double* stats) {
        return cpu::cross_entropy_shard_finish(losses, dlogits, stats, row_max, targets, weights, ignore_index,
                                               grad_scale, vocab_start, N, Vl, dlogits_bf16);
      });
}

double vocab_parallel_cross_entropy(const ParallelContext& ctx, float* losses, uint16_t* dlogits,
                                    const uint16_t* logits, const int32_t* targets, const float* weights,
                                    int64_t ignore_index, float grad_scale, int64_t N, int64_t Vl,
                                    int64_t vocab_start, int64_t V) {
  if (ctx.tp.size == 1 && dlogits)
    return cpu::cross_entropy_forward_backward_bf16(losses, dlogits, logits, targets, weights, ignore_index,
                                                    grad_scale, N, Vl);
  // tp > 1, or the loss alone (the pieces on one rank, without the exponentials' buffer).
  return across_shards(
      ctx, targets, ignore_index, N, Vl, V,
      [&](float* row_max) { cpu::cross_entropy_shard_max(row_max, logits, targets, ignore_index, N, Vl); },
      [&](const float* row_max, double* stats) {
        cpu::cross_entropy_shard_sumexp(stats, logits, row_max, targets, ignore_index, vocab_start, N, Vl);
      },
      [&](const float* row_max, const double* stats) {
        return cpu::cross_entropy_shard_finish(losses, dlogits, logits, stats, row_max, targets, weights,
                                               ignore_index, grad_scale, vocab_start, N, Vl);
      });
}

double vocab_parallel_cross_entropy(const Backend& be, Arena& arena, const ParallelContext& ctx, float* losses,
                                    float* dlogits, const float* logits, const int32_t* targets, const float* weights,
                                    int64_t ignore_index, float grad_scale, int64_t N, int64_t Vl,
                                    int64_t vocab_start, int64_t V) {
  check_split(ctx, Vl, V);
  if (ctx.tp.size == 1)
    return be.cross_entropy_forward_backward(losses, dlogits, logits, targets, weights, ignore_index, grad_scale, N,
                                             Vl);
  const size_t mark = arena.mark();
  float* row_max = static_cast<float*>(arena.allocate(sizeof(float) * static_cast<size_t>(N)));
  double* stats = static_cast<double*>(arena.allocate(sizeof(double) * 2 * static_cast<size_t>(N)));
  const double total = reduce_pieces(
      ctx.tp.communicator(be.device()), true, row_max, stats, N,
      [&](float* mx) { be.cross_entropy_shard_max(mx, logits, targets, ignore_index, N, Vl); },
      [&](const float* mx, double* st) {
        be.cross_entropy_shard_sumexp(st, dlogits, logits, mx, targets, ignore_index, vocab_start, V, N, Vl);
      },
      [&](const float* mx, const double* st) {
        return be.cross_entropy_shard_finish(losses, dlogits, st, mx, targets, weights, ignore_index, grad_scale,
                                             vocab_start, V, N, Vl);
      });
  arena.release(mark);
  return total;
}

}  // namespace megadlm
