#include "objectives/batch.h"

namespace megadlm {

void PreparedBatch::reset(int64_t batch, int64_t seq, bool segments) {
  B = batch;
  T = seq;
  const size_t N = static_cast<size_t>(batch * seq);
  inputs.resize(N);
  positions.resize(N);
  segment_ids.resize(N);
  targets.resize(N);
  weights.resize(N);
  use_segments = segments;
  stats = ObjectiveStats{};
}

void document_positions_and_segments(const int32_t* inputs, int64_t T, int32_t eod, bool reset_position_ids,
                                     bool reset_attention_mask, int32_t* positions, int32_t* segment_ids) {
  int32_t pos = 0, seg = 0;
  for (int64_t i = 0; i < T; ++i) {
    positions[i] = reset_position_ids ? pos : static_cast<int32_t>(i);
    segment_ids[i] = reset_attention_mask ? seg : 0;
    ++pos;
    if (inputs[i] == eod) {
      pos = 0;
      ++seg;
    }
  }
}

}  // namespace megadlm
