#pragma once
// TokenDispatcher: moves token rows to the experts and back, following an MoERouting.
//   dispatch: x [N, C] -> xp [P, C], rows grouped by expert (padding rows are zero)
//   combine:  out [P, C] -> y [N, C], y_n = sum over the rows r of token n of weight_r out_r
// This is the one place where expert parallelism will plug in: with --expert-model-parallel-size > 1
// an all-to-all sends each expert's segment to the rank that owns the expert after the permutation,
// and brings the outputs back before the un-permutation. With one rank both are local copies.
// The rows move through the backend of x's device (kernels/backend.h: moe_permute / moe_unpermute); the
// routing itself is made on the host.
// Legend: N tokens, C hidden, P dispatched rows.
#include <vector>

#include "core/arena.h"
#include "nn/moe/moe_router.h"

namespace megadlm {

class TokenDispatcher {
 public:
  // x [N, C] -> xp [P, C] from the arena. Also builds the token -> rows index used by combine.
  Tensor dispatch(Arena& arena, const Tensor& x, const MoERouting& r);
  // dxp [P, C] -> dx [N, C]: dx_n = sum of the rows of token n (written, or added when accumulate, through
  // a scratch [N, C] from the arena).
  void dispatch_backward(Arena& arena, const Tensor& dxp, const MoERouting& r, Tensor& dx, bool accumulate) const;

  // out [P, C] -> y [N, C] from the arena (a token no expert took gets 0). Saves out for the backward.
  Tensor combine(Arena& arena, const Tensor& out, const MoERouting& r);
  // dy [N, C] -> dout [P, C] written (weight_r dy_n) and dweight [P] written (<dy_n, out_r>).
  void combine_backward(const Tensor& dy, const MoERouting& r, Tensor& dout, float* dweight) const;

 private:
  // The routing's index arrays where the backend reads them: the host vectors on the CPU, copies in the
  // arena on a device (uploaded by dispatch, kept for combine and both backwards).
  struct Index {
    const int32_t* token = nullptr;   // [P] MoERouting::token
    const float* weight = nullptr;    // [P] MoERouting::weight
    const int32_t* offsets = nullptr; // [N+1] token_offsets_
    const int32_t* rows = nullptr;    // token_rows_
  };
  int64_t C_ = 0;
  std::vector<int32_t> token_offsets_;  // [N+1] CSR of the rows of each token, ascending
  std::vector<int32_t> token_rows_;     // [rows carrying a token]
  Index index_;
  Tensor out_;                          // [P, C] saved expert outputs
};

}  // namespace megadlm
