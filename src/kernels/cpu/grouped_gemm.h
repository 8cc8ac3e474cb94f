#pragma once
// Grouped matrix products (an MoE layer's experts): G products whose rows are consecutive segments of
// shared row-major operands, group g owning rows [offsets[g], offsets[g+1]) (none at all is fine) and
// its own weight W_g [N, K] (row-major, row stride K; the experts' fc1 / fc2 weight layout).
//
//   grouped_gemm_forward:         Y [P, N],  rows of g  = X [P, K] rows of g @ W_g^T            written
//   grouped_gemm_backward_data:   dX [P, K], rows of g  = dY [P, N] rows of g @ W_g             written
//   grouped_gemm_backward_weight: dW_g [N, K]          += (dY rows of g)^T @ (X rows of g)      accumulated
//
// P = offsets[G]; offsets [G+1] non-decreasing from 0; W and dW are arrays of G pointers. An empty group
// leaves its dW_g as it was (it adds nothing), as a per-group loop that skips it does.
//
// One OpenMP pass covers every group: the outputs of all groups become one flattened list of (group,
// piece) work items, shared out dynamically, costliest first, so a heavily loaded expert and many lightly
// loaded ones keep every thread busy in a single parallel region. A group's output stays whole when it
// fits within 1 / (2 x threads) of all the work, and is otherwise cut into that many pieces (rows first,
// columns when a few rows hold much of the work, none thinner than 64): oneDNN's sgemm runs a whole
// product faster than the same product in small tiles, so the cutting goes only as far as the balance
// needs. Each item (but for the weight gradient's paths below) is one oneDNN sgemm (the kernels cpu::gemm
// calls) over its full reduction; called from inside the parallel region it runs on the calling thread. A
// single item (or one thread) runs outside any region, so oneDNN threads it itself.
//
// The weight gradient has two paths of its own. Its output has the weight's shape however many rows the
// expert has, so where that output is too small to cut into enough pieces (a fine-grained expert holding
// most of the rows, on many threads) its reduction over the rows is cut as well, into even pieces of at
// least 32 rows: the first accumulates into dW_g, each later one writes its partial sum to scratch, and
// the partial sums are then added to dW_g in the order of their rows. And an item over fewer than 8 rows
// (an expert that got few tokens) skips oneDNN, whose packing costs more than those few multiply-adds per
// element: a plain vector loop adds its rank-1 terms to each row of dW_g in row order.
//
// Numerics: every output element is one fp32 dot product over the whole reduction (K, N, or the group's
// rows; for a weight gradient whose rows are cut, the sum of the pieces' dot products) by oneDNN's sgemm
// kernels (the few-row loop above for a weight gradient over fewer than 8 rows), as in the per-group loop
// of cpu::gemm calls; the loop's products run over a whole segment on every thread, the items over a
// piece on one thread, and oneDNN's blocking (so the order of its partial sums) depends on the shape and
// thread count, so the two agree to fp32 rounding, not bitwise: within 1e-5 relative in
// tests/kernels/test_grouped_gemm.cpp and tests/moe/test_moe_grouped.cpp. The cut depends only on the
// shapes, the offsets and the thread count, so for a given thread count every result is the same bits on
// every run (the dynamic shares decide only which thread computes an item;
// tests/kernels/test_grouped_gemm_paths.cpp checks it).
#include <cstdint>

namespace megadlm::cpu {

void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                          const float* const* W, float* Y);
void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                const float* const* W, float* dX);
void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* X, float* const* dW);

// The most pieces grouped_gemm_backward_weight cuts one group's reduction into, given `threads`
// threads (1 where no reduction is cut). For tests, which need to know that a case takes that path.
int64_t grouped_gemm_weight_reduction_pieces(int64_t G, const int64_t* offsets, int64_t N, int64_t K, int threads);

}  // namespace megadlm::cpu
