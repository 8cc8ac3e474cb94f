#pragma once
// The autoregressive objective: predict token i+1 from tokens <= i, the mean cross-entropy over the
// tokens of the micro-batch. Megatron's loss mask: --eod-mask-loss drops the loss at positions whose
// input is the end-of-document token. Supervised fine-tuning (a SampleBatch with a loss mask): position
// i carries loss only when its label, token i + 1, is a response token (loss_mask[i + 1] == 1), and
// the mean runs over those loss tokens of the micro-batch.
#include "objectives/objective.h"

namespace megadlm {

struct NextTokenOptions {
  int32_t eod = -1;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  bool eod_mask_loss = false;
};

class NextToken final : public Objective {
 public:
  explicit NextToken(const NextTokenOptions& opt) : opt_(opt) {}
  // Weights are micro_batch_weight / (number of loss tokens), so that the micro-batch losses of a
  // global batch, each scaled by micro_batch_weight = 1 / micro-batches, sum to the mean loss.
  ObjectiveStats prepare(const SampleBatch& samples, float micro_batch_weight, MicroBatch& out) const override;
  std::unique_ptr<Objective> for_evaluation() const override { return std::make_unique<NextToken>(opt_); }
  std::string describe() const override;
  std::string log_fields(const ObjectiveStats&) const override { return ""; }
  void add_metrics(const ObjectiveStats&, nlohmann::json&) const override {}
  const char* perplexity_name() const override { return "ppl"; }

 private:
  NextTokenOptions opt_;
};

}  // namespace megadlm
