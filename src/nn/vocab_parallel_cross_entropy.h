#pragma once
// Vocab-parallel softmax cross-entropy (Megatron's vocab_parallel_cross_entropy): each tensor-parallel
// rank holds the logits of its vocabulary shard, [N, Vl] with Vl = balanced_rows(V, tp, rank).size
// (core/parameters.h; shards may differ by one column), and they are never gathered. Per row the
// max is all-reduced (max), then the sum of exp(x - max) and the target's logit (held by one rank)
// are all-reduced (sum, in double); loss and gradient follow locally. Every rank returns the same
// losses. At tp = 1 it is the backend's one-pass cross-entropy.
// Legend: N tokens, Vl this rank's vocabulary columns.
#include "core/arena.h"
#include "kernels/backend.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// a: the logits of this rank's columns [vocab_start, vocab_start + Vl) of a vocabulary of a.V, fp32 or
// bf16, the losses, the gradient (fp32 and/or bf16), targets in [0, V) or ignore_index, weights
// (kernels/types.h: CrossEntropyArgs), every pointer on be's device. Returns sum_n w_n CE_n, the same
// on every tp rank. The row statistics between the reductions live in `arena` (released before
// returning); they are reduced over the tp group's communicator of be's device. On the CPU the
// targets are checked here, with an Error naming the first bad one; a device gives it a NaN loss.
double vocab_parallel_cross_entropy(const Backend& be, Arena& arena, const ParallelContext& ctx,
                                    const CrossEntropyArgs& a);

}  // namespace megadlm
