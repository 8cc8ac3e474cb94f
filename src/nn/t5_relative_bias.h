#pragma once
// T5's relative position bias (HuggingFace's T5Attention.compute_bias): the score of query i and key j
// gets bias[h, bucket(j - i)] added, from a learned table [num_buckets, H]. The bucket of a relative
// distance r = j - i:
//   bidirectional (the encoder): half the buckets for r > 0, half for r <= 0, then |r| as below with
//                                num_buckets / 2;
//   unidirectional (the decoder): r > 0 (a future key) is bucket 0, else -r as below;
//   with n buckets left, distances below max_exact = n / 2 are their own bucket, larger ones share
//   logarithmically spaced buckets up to max_distance: max_exact + floor(log(d / max_exact) /
//   log(max_distance / max_exact) * (n - max_exact)), at most n - 1. The logarithm is taken in fp32, as
//   PyTorch takes it, so that the buckets are HuggingFace's.
// One table per stack, held by the stack's first layer and read by all of its layers: the stack makes
// the bias once per forward, each layer's self-attention adds its gradient to one dbias, and the
// table's gradient is that sum scattered by bucket. Host loops: the T5 family runs on the CPU in fp32
// (docs/t5.md). Under tensor parallelism a rank's attention holds heads [r*H/tp, (r+1)*H/tp), so its
// table is those columns, [num_buckets, H/tp]: registered as a column shard of the whole [num_buckets, H]
// (split_dim 1), so that checkpoints hold the single-process table whatever the layout.
// Legend: H heads, Hl = H/tp this rank's heads, T query rows, S key rows (positions 0 .. T-1 and
// 0 .. S-1 in every sequence).
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/parameters.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// The bucket of relative distance `relative` (key position - query position).
int64_t t5_relative_position_bucket(int64_t relative, bool bidirectional, int64_t num_buckets, int64_t max_distance);

class T5RelativeBias {
 public:
  T5RelativeBias() = default;
  // Registers `name`.weight, this rank's columns [num_buckets, Hl] of [num_buckets, H] (H: all heads).
  T5RelativeBias(ParamStore& store, const ParallelContext& ctx, const std::string& name, int64_t num_buckets,
                 int64_t H, int64_t max_distance, bool bidirectional, float init_std);

  // -> bias [Hl, T, S] (arena) of this rank's heads; saves the buckets.
  Tensor forward(Arena& arena, int64_t T, int64_t S);
  // dbias [Hl, T, S] (the sum over the sequences and the layers) -> the table's gradient accumulated.
  void backward(const Tensor& dbias);
  // Generation, forward only (nothing saved): the bias [Hl, 1, S] of query position i against key
  // positions 0 .. S-1 (the decoder's new row against its cached keys).
  Tensor query_row(Arena& arena, int64_t i, int64_t S) const;

 private:
  // The buckets [T, S] of query positions i0 .. i0+T-1 against key positions 0 .. S-1.
  std::vector<int64_t> buckets(int64_t i0, int64_t T, int64_t S) const;
  // The table's entries at `bucket` [T, S] -> bias [Hl, T, S] (arena).
  Tensor lookup(Arena& arena, const std::vector<int64_t>& bucket, int64_t T, int64_t S) const;

  ParamStore* store_ = nullptr;
  int64_t buckets_ = 0, H_ = 0, max_distance_ = 0;  // H_: this rank's heads, Hl
  bool bidirectional_ = true;
  int w_ = -1;
  int64_t T_ = 0, S_ = 0;
  std::vector<int64_t> bucket_;  // [T, S], saved by forward
};

}  // namespace megadlm
