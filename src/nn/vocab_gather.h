#pragma once
// The logits of a vocabulary split over the tensor-parallel ranks, gathered: each rank holds the
// columns balanced_rows(V, tp, rank) of every row (core/parameters.h: shards differ by one column at
// most); the result is the whole [N, V] on every rank, for the tools that read all the logits
// (evaluation's argmax, sampling). Training never gathers them (nn/vocab_parallel_cross_entropy.h).
// Legend: N rows, V vocabulary, Vl this rank's columns.
#include <cstdint>

#include "core/arena.h"
#include "core/tensor.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// local [N, Vl] fp32 -> [N, V] (arena); local itself at tp = 1. Collective over ctx.tp.
Tensor gather_vocab_shards(Arena& arena, const ParallelContext& ctx, const Tensor& local, int64_t V);

}  // namespace megadlm
