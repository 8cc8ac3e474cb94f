#pragma once
// Row kernels where a group of L lanes (8, 16 or 32, within one warp) owns a row of I 16-byte packs per lane
// (norm.cu's fast path, qkv_norm_rope.cu): the shapes, the rows a group walks, and the fixed order in
// which a block's groups add up their per-column sums (no atomics: the same bits on every run).
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace megadlm::cuda {

constexpr int kRowThreads = 256;         // threads per block: kRowThreads / L groups
constexpr int64_t kMaxRowBlocks = 512;   // backward kernels: at most this many block partials per column

// Column of element 0 of pack i for lane lg: consecutive lanes read consecutive 16-byte packs.
template <typename T, int L>
__device__ __forceinline__ int pack_col(int i, int lg) {
  return (i * L + lg) * Pack<T>::kN;
}

// Calls f(std::integral_constant<int, L>, std::integral_constant<int, I>) for the shape that covers a row of
// C elements of T exactly (L = 8 or 16 with I = 1; L = 32 with I in 1, 2, 3, 4, 6, 8, 12, 16) and returns
// true; false when none does. Per lane at most 64 values (registers).
template <typename T, typename F>
bool with_row_shape(int64_t C, F&& f) {
  constexpr int kV = Pack<T>::kN;
  if (C % kV != 0) return false;
  const int64_t packs = C / kV;
  using std::integral_constant;
  if (packs == 8) return f(integral_constant<int, 8>{}, integral_constant<int, 1>{}), true;
  if (packs == 16) return f(integral_constant<int, 16>{}, integral_constant<int, 1>{}), true;
  bool done = false;
  auto try_i = [&](auto i) {
    if constexpr (decltype(i)::value * kV <= 64)
      if (!done && packs == 32 * decltype(i)::value) f(integral_constant<int, 32>{}, i), done = true;
  };
  try_i(integral_constant<int, 1>{}), try_i(integral_constant<int, 2>{}), try_i(integral_constant<int, 3>{});
  try_i(integral_constant<int, 4>{}), try_i(integral_constant<int, 6>{}), try_i(integral_constant<int, 8>{});
  try_i(integral_constant<int, 12>{}), try_i(integral_constant<int, 16>{});
  return done;
}

// A backward's walk over `rows` rows by groups of `groups` per block: each group takes rows_per_group
// consecutive rows, enough that the blocks stay within kMaxRowBlocks (a function of the shape alone).
struct GroupWalk {
  int64_t rows_per_group, blocks;
};
inline GroupWalk group_walk(int64_t rows, int groups) {
  const int64_t per_group = std::max<int64_t>(1, (rows + groups * kMaxRowBlocks - 1) / (groups * kMaxRowBlocks));
  return {per_group, (rows + groups * per_group - 1) / (groups * per_group)};
}

// The block's per-column sums in shared memory: group 0's contribution written, then group 1's added, ...
// add(first) makes the calling group's contribution (first: write rather than add). Every thread of the
// block must call it.
template <typename F>
__device__ __forceinline__ void add_groups_in_order(int group, int groups, F&& add) {
  for (int gi = 0; gi < groups; ++gi) {
    if (group == gi) add(gi == 0);
    __syncthreads();
  }
}

}  // namespace megadlm::cuda
