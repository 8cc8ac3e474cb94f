#pragma once
// What objectives consume and produce. A SampleBatch is B consecutive samples of the global sample
// stream, each T+1 token ids (Megatron's GPTDataset convention); an objective turns it into the
// model's MicroBatch (inputs, positions, segments, targets, weights) plus statistics for the log.
#include <cstdint>
#include <vector>

#include "models/language_model.h"

namespace megadlm {

struct SampleBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;  // [B, T+1]
  uint64_t first_sample = 0;    // global index of row 0; row b is sample first_sample + b
};

struct ObjectiveStats {
  double loss_tokens = 0;   // tokens that carry loss (masked tokens for DLM)
  double real_tokens = 0;   // tokens that are not padding
  double sum_t = 0;         // DLM: sum of per-sequence t
  double sequences = 0;
};

struct PreparedBatch {
  std::vector<int32_t> inputs, positions, segment_ids, targets;  // [B*T]
  std::vector<float> weights;                                    // [B*T]
  bool use_segments = false;
  ObjectiveStats stats;
  int64_t B = 0, T = 0;

  // Sizes every array for B x T tokens and clears the statistics.
  void reset(int64_t batch, int64_t seq, bool segments);

  MicroBatch micro_batch() const {
    MicroBatch mb;
    mb.B = B;
    mb.T = T;
    mb.tokens = inputs.data();
    mb.positions = positions.data();
    mb.segment_ids = use_segments ? segment_ids.data() : nullptr;
    mb.targets = targets.data();
    mb.weights = weights.data();
    return mb;
  }
};

// Megatron's get_ltor_masks_and_position_ids: positions restart after each end-of-document token
// with reset_position_ids, and documents attend only within themselves with reset_attention_mask
// (the end-of-document token belongs to the document it ends). Fills positions and segment_ids for
// row `b` of `inputs` [T].
void document_positions_and_segments(const int32_t* inputs, int64_t T, int32_t eod, bool reset_position_ids,
                                     bool reset_attention_mask, int32_t* positions, int32_t* segment_ids);

}  // namespace megadlm
