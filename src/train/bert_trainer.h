#pragma once
// pretrain_difflm --model-type bert: BERT pretraining (the MLM loss and, with the binary head, the
// sentence-order loss) on the CPU in fp32 or --bf16, with or without --recompute-* (docs/bert.md), under
// data, tensor and pipeline parallelism (with or without sequence parallelism and the distributed
// optimizer; with pp > 1 the micro-batches go through the 1F1B schedule, train/pipeline_schedule.h, every
// stage reading each of them). Samples come from
// BertDataset over the --data-path prefix (sentence-split, --split by documents); a global batch of
// --global-batch-size / --micro-batch-size micro-batches, each data-parallel rank taking its share as
// Megatron's sampler deals them, accumulates into one AdamW update under the LR schedule. The
// checkpoints are the native format (model_type "bert", optimizer state included; a resume is
// bitwise; any layout reads any other's); the log lines and metrics.jsonl follow Trainer's with the
// two losses beside the total.
// The loop, the checkpoints and the log are FamilyTrainer's (train/family_trainer.h), which T5Trainer
// shares.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/bert_dataset.h"
#include "models/bert_model.h"
#include "train/arguments.h"
#include "train/bert_eval.h"
#include "train/family_trainer.h"

namespace megadlm {

class BertTrainer : public FamilyTrainer {
 public:
  explicit BertTrainer(const TrainArgs& args);
  ~BertTrainer() override;

  // The first `batches` micro-batches of `data` (the same ones at every evaluation).
  BertEvalResult evaluate(const BertDataset& data, int64_t batches);
  BertModel& model() { return *model_; }

 private:
  void build_datasets();

  std::vector<std::string> loss_names() const override;
  void micro_batch(int64_t first, int64_t M, double* parts) override;
  void pipeline_micro_batches(const std::function<int64_t(int64_t)>& first, int64_t M, double* parts) override;
  int tied_embedding_copy() const override;
  // Samples [first, first + B) of the training data, the MLM rows weighted for the micro-batch's mean.
  BertBatch training_batch(int64_t first);
  // A micro-batch's losses into the step's parts (its share of M micro-batches).
  void add_parts(const BertLosses& l, int64_t M, double* parts) const;
  bool has_validation() const override { return valid_ != nullptr; }
  void evaluate_and_log(int64_t iteration) override;
  void log_header() const override;
  int64_t tokens_per_sample() const override { return args_.seq_length; }
  double flops_per_sample() const override;
  void add_checkpoint_meta(nlohmann::json& meta) const override;
  nlohmann::json model_options() const override;
  nlohmann::json model_options_of(const nlohmann::json& meta) const override;

  BertTokens tokens_;
  std::unique_ptr<BertDataset> train_, valid_;
  std::unique_ptr<BertModel> model_;
  BertSample sample_;  // storage each training sample is read into
};

}  // namespace megadlm
