#pragma once
// The autoregressive objective: predict token i+1 from tokens <= i, mean cross-entropy over the
// tokens of the micro-batch (Megatron's loss mask; --eod-mask-loss drops the targets that follow an
// end-of-document token... as Megatron: the loss at positions whose *input* is eod is masked).
#include "objectives/batch.h"

namespace megadlm {

struct NextTokenOptions {
  int32_t eod = -1;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
};

// Weights are 1 / (number of loss tokens) * micro_batch_weight, so that the micro-batch losses of a
// global batch, each scaled by micro_batch_weight = 1 / num_micro_batches, sum to the mean loss.
void prepare_next_token(const SampleBatch& in, const NextTokenOptions& opt, float micro_batch_weight,
                        PreparedBatch& out);

}  // namespace megadlm
