#include "objectives/next_token.h"

#include "core/error.h"
#include "objectives/documents.h"

namespace megadlm {

ObjectiveStats NextToken::prepare(const SampleBatch& in, float micro_batch_weight, MicroBatch& out) const {
  const int64_t B = in.B, T = in.T, N = B * T;
  out.reset(B, T, micro_batch_weight);
  MEGADLM_CHECK(in.loss_mask.empty() || in.loss_mask.size() == in.tokens.size(), "next-token objective: a loss mask of ",
                in.loss_mask.size(), " values for ", in.tokens.size(), " tokens");
  int64_t loss_tokens = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row = in.tokens.data() + b * (T + 1);
    // --sft: the label of position i is token i + 1, which carries loss only when it is a response token.
    const uint8_t* response = in.loss_mask.empty() ? nullptr : in.loss_mask.data() + b * (T + 1);
    for (int64_t i = 0; i < T; ++i) {
      out.tokens[b * T + i] = row[i];
      const bool masked = (opt_.eod_mask_loss && row[i] == opt_.eod) || (response && response[i + 1] == 0);
      out.targets[b * T + i] = masked ? kIgnoreIndex : row[i + 1];
      loss_tokens += masked ? 0 : 1;
    }
    document_positions_and_segments(row, T, opt_.eod, opt_.reset_position_ids, opt_.reset_attention_mask,
                                    out.positions.data() + b * T, out.segment_ids.data() + b * T);
  }
  if (!opt_.reset_attention_mask) out.segment_ids.clear();
  const float w = loss_tokens > 0 ? micro_batch_weight / static_cast<float>(loss_tokens) : 0.0f;
  for (int64_t n = 0; n < N; ++n) out.weights[n] = out.targets[n] == kIgnoreIndex ? 0.0f : w;
  ObjectiveStats stats;
  stats.loss_tokens = static_cast<double>(loss_tokens);
  stats.real_tokens = static_cast<double>(N);
  stats.sequences = static_cast<double>(B);
  return stats;
}

std::string NextToken::describe() const {
  return std::string("next-token: mean cross-entropy of the loss tokens") + (opt_.eod_mask_loss ? ", end-of-document positions masked" : "") +
         (opt_.reset_attention_mask ? ", documents attend within themselves" : "") +
         (opt_.reset_position_ids ? ", positions restart per document" : "");
}

}  // namespace megadlm
