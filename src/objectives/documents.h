#pragma once
// Megatron's get_ltor_masks_and_position_ids for documents packed in a sequence: positions restart after
// each end-of-document token with reset_position_ids, and documents attend only within themselves with
// reset_attention_mask (the end-of-document token belongs to the document it ends).
#include <cstdint>

namespace megadlm {

// Fills positions [T] and segment_ids [T] of one row of input ids [T].
void document_positions_and_segments(const int32_t* inputs, int64_t T, int32_t eod, bool reset_position_ids,
                                     bool reset_attention_mask, int32_t* positions, int32_t* segment_ids);

}  // namespace megadlm
