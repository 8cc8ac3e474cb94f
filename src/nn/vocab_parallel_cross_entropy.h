#pragma once
// Vocab-parallel softmax cross-entropy (Megatron's vocab_parallel_cross_entropy): each tensor-parallel
// rank holds the logits of its vocabulary shard, [N, V/tp], and they are never gathered. Per row the
// max is all-reduced (max), then the sum of exp(x - max) and the target's logit (held by one rank)
// are all-reduced (sum, in double); loss and dlogits follow locally. Every rank returns the same
// losses. At tp = 1 it is cpu::cross_entropy_forward_backward exactly.
// Legend: N tokens, Vl = V/tp this rank's vocabulary columns.
#include <cstdint>

#include "core/arena.h"
#include "parallel/parallel_context.h"

namespace megadlm {

class Backend;

// logits [N, Vl]: columns [vocab_start, vocab_start + Vl) of a vocabulary of V. losses [N] (or null),
// dlogits [N, Vl] (or null; may alias logits), targets [N] in [0, V) or ignore_index, weights [N]
// (or null = 1). Returns sum_n w_n CE_n, the same on every tp rank.
// With dlogits_bf16 [N, Vl] the gradient is written there in bf16 (the bits of the fp32 gradient
// rounded); dlogits must then be given too (it may alias logits): at tp > 1 it holds the exponentials
// between the reductions, at tp = 1 it is left alone.
double vocab_parallel_cross_entropy(const ParallelContext& ctx, float* losses, float* dlogits, const float* logits,
                                    const int32_t* targets, const float* weights, int64_t ignore_index,
                                    float grad_scale, int64_t N, int64_t Vl, int64_t vocab_start, int64_t V,
                                    uint16_t* dlogits_bf16 = nullptr);

// The same on bf16 logits [N, Vl] (the output layer under --bf16): the gradient is written in bf16 to
// dlogits [N, Vl] (or null; may alias logits, in place).
double vocab_parallel_cross_entropy(const ParallelContext& ctx, float* losses, uint16_t* dlogits,
                                    const uint16_t* logits, const int32_t* targets, const float* weights,
                                    int64_t ignore_index, float grad_scale, int64_t N, int64_t Vl,
                                    int64_t vocab_start, int64_t V);

// The same on a device (fp32 logits; every pointer on be's device): at tp = 1 the backend's
// single-rank kernel; at tp > 1 its three pieces, with the row maxima and the stats in `arena` (device
// memory, released before returning) reduced over the tp group's device communicator. The targets are
// not checked on the host: an out-of-range one gives a NaN loss (kernels/backend.h). losses must be
// given.
double vocab_parallel_cross_entropy(const Backend& be, Arena& arena, const ParallelContext& ctx, float* losses,
                                    float* dlogits, const float* logits, const int32_t* targets, const float* weights,
                                    int64_t ignore_index, float grad_scale, int64_t N, int64_t Vl,
                                    int64_t vocab_start, int64_t V);

}  // namespace megadlm
