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
// One OpenMP pass covers every group: the outputs of all groups are cut into tiles, and the flattened
// list of (group, tile) work items is shared out dynamically, largest first, so a heavily loaded expert
// and many lightly loaded ones keep every thread busy in a single parallel region. Each tile is one
// oneDNN sgemm (the kernels cpu::gemm calls) over the tile's full reduction; called from inside the
// parallel region it runs on the calling thread. A single work item runs outside any region, so oneDNN
// threads it itself.
//
// Numerics: every output element is one fp32 dot product over the whole reduction (K, N, or the
// group's rows) by oneDNN's sgemm kernels, as in the per-group loop of cpu::gemm calls; the loop's
// products are over a whole segment with every thread, the tiles' over a tile on one thread, and
// oneDNN's blocking (so the order of its partial sums) may depend on the shape and thread count, so
// the two agree to fp32 rounding rather than bitwise (tests/kernels/test_grouped_gemm.cpp states the
// tolerance).
#include <cstdint>

namespace megadlm::cpu {

void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                          const float* const* W, float* Y);
void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                const float* const* W, float* dX);
void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* X, float* const* dW);

}  // namespace megadlm::cpu
