#include "objectives/documents.h"

namespace megadlm {

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
