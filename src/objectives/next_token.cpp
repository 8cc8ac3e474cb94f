#include "objectives/next_token.h"

namespace megadlm {

void prepare_next_token(const SampleBatch& in, const NextTokenOptions& opt, float micro_batch_weight,
                        PreparedBatch& out) {
  const int64_t B = in.B, T = in.T, N = B * T;
  out.reset(B, T, opt.reset_attention_mask);
  int64_t loss_tokens = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row = in.tokens.data() + b * (T + 1);
    for (int64_t i = 0; i < T; ++i) {
      out.inputs[b * T + i] = row[i];
      const bool masked = opt.eod_mask_loss && row[i] == opt.eod;
      out.targets[b * T + i] = masked ? kIgnoreIndex : row[i + 1];
      loss_tokens += masked ? 0 : 1;
    }
    document_positions_and_segments(row, T, opt.eod, opt.reset_position_ids, opt.reset_attention_mask,
                                    out.positions.data() + b * T, out.segment_ids.data() + b * T);
  }
  const float w = loss_tokens > 0 ? micro_batch_weight / static_cast<float>(loss_tokens) : 0.0f;
  for (int64_t n = 0; n < N; ++n) out.weights[n] = out.targets[n] == kIgnoreIndex ? 0.0f : w;
  out.stats.loss_tokens = static_cast<double>(loss_tokens);
  out.stats.real_tokens = static_cast<double>(N);
  out.stats.sequences = static_cast<double>(B);
}

}  // namespace megadlm
