#pragma once
// pretrain_difflm --model-type bert: BERT pretraining (the MLM loss and, with the binary head, the
// sentence-order loss) on the CPU in fp32 (docs/bert.md), under data and tensor parallelism (with or
// without sequence parallelism and the distributed optimizer; one pipeline stage). Samples come from
// BertDataset over the --data-path prefix (sentence-split, --split by documents); a global batch of
// --global-batch-size / --micro-batch-size micro-batches, each data-parallel rank taking its share as
// Megatron's sampler deals them, accumulates into one AdamW update under the LR schedule. The
// checkpoints are the native format (model_type "bert", optimizer state included; a resume is
// bitwise; any layout reads any other's); the log lines and metrics.jsonl follow Trainer's with the
// two losses beside the total.
// What the Trainer shares: ParallelTraining (groups, gradient reduction, norm, update, checkpoints of
// any layout), AdamW, the schedule, StepGuard, the --save / --load checks (train/run_directories.h),
// the tokenizer setup, JsonlWriter.
#include <cstdint>
#include <memory>
#include <string>

#include "core/log.h"
#include "data/bert_dataset.h"
#include "models/bert_model.h"
#include "optim/adamw.h"
#include "tokenizers/tokenizer.h"
#include "train/arguments.h"
#include "train/metrics.h"
#include "train/parallel_training.h"
#include "train/step_guard.h"

namespace megadlm {

struct BertEvalResult {
  double mlm_loss = 0;      // mean cross-entropy over the masked tokens
  double sop_loss = 0;      // mean sentence-order cross-entropy per sequence (0 without the binary head)
  double mlm_accuracy = 0;  // share of masked tokens whose argmax is the original id
  int64_t batches = 0;
};

class BertTrainer {
 public:
  explicit BertTrainer(const TrainArgs& args);
  ~BertTrainer();
  // Runs to --train-iters (or --exit-interval / --exit-duration-in-mins). Returns the last iteration.
  int64_t run();

  // The first `batches` micro-batches of `data` (the same ones at every evaluation).
  BertEvalResult evaluate(const BertDataset& data, int64_t batches);
  BertModel& model() { return *model_; }

 private:
  struct Step {
    double mlm = 0, sop = 0, grad_norm = 0, lr = 0;
  };
  // The sums of a log interval.
  struct Interval {
    double mlm = 0, sop = 0;
    int64_t steps = 0;
    Timer timer;
  };

  BertDatasetConfig dataset_config(int64_t num_samples) const;
  void build_datasets();
  // Samples [first, first + B) of `data` (modulo its size) as one batch.
  BertBatch batch_of(const BertDataset& data, int64_t first, int64_t B);
  Step train_step();
  void log_interval(const Step& last, Interval& interval);
  void evaluate_and_log(int64_t iteration);
  bool save_or_exit(const Timer& run_timer);
  void save(int64_t iteration);
  void load();
  nlohmann::json checkpoint_meta() const;

  TrainArgs args_;
  std::unique_ptr<Tokenizer> tokenizer_;
  BertTokens tokens_;
  std::unique_ptr<BertDataset> train_, valid_;
  std::string data_description_;
  std::unique_ptr<ParallelTraining> parallel_;  // groups, gradient reduction, checkpoints (parallel_training.h)
  std::unique_ptr<BertModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  int64_t iteration_ = 0;
  uint64_t consumed_samples_ = 0;
  std::string resumed_from_;
  StepGuard step_guard_;
  double peak_flops_ = 0;
  std::unique_ptr<JsonlWriter> metrics_;
  BertSample sample_;  // storage each sample is read into
};

}  // namespace megadlm
