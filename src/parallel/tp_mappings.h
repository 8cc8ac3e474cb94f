#pragma once
// Tensor-parallel mappings (Megatron's copy_to / reduce_from / gather_from / reduce_scatter_to
// regions) on row-major activations [N, C], N = B*T tokens.
//
// Without sequence parallelism every tp rank holds all N rows of the residual stream; a
// column-parallel projection's input gradient is a partial sum over the ranks (each holds a slice of
// the output features) and is all-reduced; a row-parallel projection's output likewise.
// With --sequence-parallel rank r holds rows [r*N/tp, (r+1)*N/tp) between the blocks: the input of a
// column-parallel projection is all-gathered to N rows, and the all-reduces become reduce-scatters
// back to the local rows. Every function is the identity (or a copy) at tp = 1. Tensors may live on a
// device (--device cuda): their collectives then go over the tp group's device communicator, and the
// staging buffers are on that device.
#include <cstdint>

#include "core/arena.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// True when activations between blocks are split along the rows (tp > 1 and --sequence-parallel).
inline bool sequence_parallel(const ParallelContext& ctx) { return ctx.sequence_parallel && ctx.tp.size > 1; }

// Rows this rank holds of an N-row activation: N / tp under sequence parallelism, else N. Throws
// naming --sequence-parallel when N does not divide.
int64_t local_rows(const ParallelContext& ctx, int64_t N);

// x [N/tp, C] -> [N, C] from the arena under sequence parallelism; x itself otherwise.
Tensor gather_rows(Arena& arena, const ParallelContext& ctx, const Tensor& x);
// The same into a staging buffer that lives until the next call with the same slot (for backward
// passes, which have no arena): slot 0 and 1 are distinct buffers.
Tensor gather_rows_scratch(const ParallelContext& ctx, const Tensor& x, int slot);

// partial [N, C], this rank's share of a sum over tp -> dx: the all-reduced [N, C] or, under sequence
// parallelism, this rank's reduce-scattered rows [N/tp, C]. Written, or added when accumulate.
// partial is clobbered. partial may be dx itself when !accumulate and not sequence parallel.
void reduce_rows(const ParallelContext& ctx, Tensor& partial, Tensor& dx, bool accumulate);
// Same, for a forward output: y [N, C] partial -> [N/tp, C] (arena) or y all-reduced in place.
Tensor reduce_rows(Arena& arena, const ParallelContext& ctx, Tensor& y);

// A staging buffer of n floats on `device` for slot 0..3 (reused; contents undefined).
float* tp_scratch(int64_t n, int slot, Device device = Device::CPU);

}  // namespace megadlm
