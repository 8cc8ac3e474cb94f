#pragma once
// What BertTrainer and T5Trainer share: the loop of a model that ParallelTraining attaches by its
// parameters (train/parallel_training.h), on the CPU, in fp32 or --bf16 (the model's precision policy,
// whose bf16 weight copies AdamW writes on its pass or are remade after each step and load). Here: the --save / --load checks
// (train/run_directories.h), the tokenizer, the groups, AdamW and the schedule, the step (the local
// micro-batches of Megatron's sampler, the gradient reduction, the norm, the update or the skip under
// StepGuard), the native checkpoints (save, resume, --finetune, the flags' config against the
// checkpoint's), the log line and metrics.jsonl, the evaluation cadence and the exits. A family gives
// its model's parameters, one micro-batch's forward and backward (under pp > 1 the step's micro-batches
// through the pipeline schedule), its evaluation, its log header and its checkpoint fields.
//
// A step's losses are `parts` (loss_names() names them: "mlm", "sop"; "lm"); the loss is their sum.
// micro_batch adds each part's share of the step on this rank (its micro-batch's loss / M for M local
// micro-batches); the step's parts are their mean over the data-parallel ranks.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "optim/adamw.h"
#include "tokenizers/tokenizer.h"
#include "train/arguments.h"
#include "train/metrics.h"
#include "train/parallel_training.h"
#include "train/step_guard.h"

namespace megadlm {

class FamilyTrainer {
 public:
  virtual ~FamilyTrainer();
  // Runs to --train-iters (or --exit-interval / --exit-duration-in-mins). Returns the last iteration.
  int64_t run();

 protected:
  // family: the --model-type name ("bert", "t5") that checkpoints record and the log shows.
  // Checks --save / --load, builds the tokenizer and checks it against the data's.
  FamilyTrainer(const TrainArgs& args, std::string family);

  // Once args_.model is final: the groups (collective over the world).
  void make_groups();
  // Once the model exists on this rank: its initialisation, AdamW, the attachment (make_params builds
  // the model for a layout), the --load checkpoint, metrics.jsonl.
  // precision: the model's policy (null in fp32), its weight copies kept current from here on.
  void start(ParamStore& params, ParallelTraining::ParamsFactory make_params, MixedPrecision* precision = nullptr);
  // The flags' recomputation and precision policy on the family's model (BertModel, T5Model): its
  // policy, for start(), or null in fp32.
  template <typename Model>
  MixedPrecision* apply_precision(Model& model) const {
    model.set_recompute(args_.precision.recompute);
    if (args_.precision.precision.mode == PrecisionMode::FP32) return nullptr;
    model.set_precision(args_.precision.precision);
    return model.precision();
  }
  // For the log header: the products' precision (and why, where --bf16 chose for the CPU) and the
  // recomputation, e.g. "bf16 (bf16 products through oneDNN, ...); recompute full, uniform, 1 layer(s)".
  std::string precision_text() const;

  // ---- what a family gives ----
  virtual std::vector<std::string> loss_names() const = 0;
  // Local micro-batch m of M (samples [first, first + B) of the training data): forward and backward,
  // gradients scaled so that the step's is the mean of the micro-batches' mean losses; adds each
  // part's loss / M to parts.
  virtual void micro_batch(int64_t first, int64_t M, double* parts) = 0;
  // Under pipeline parallelism (pp > 1) the step's M local micro-batches through the 1F1B schedule
  // (train/pipeline_schedule.h), micro-batch m of samples [first(m), first(m) + B); adds to parts as M
  // micro_batch calls would, the same on every stage. A family without a pipeline split refuses.
  virtual void pipeline_micro_batches(const std::function<int64_t(int64_t m)>& first, int64_t M, double* parts);
  // Under pp > 1, the id of this rank's copy of the tied word embeddings when it is the last stage's
  // (the gradient norm counts it once), else -1.
  virtual int tied_embedding_copy() const { return -1; }
  virtual bool has_validation() const = 0;
  virtual void evaluate_and_log(int64_t iteration) = 0;
  virtual void log_header() const = 0;           // the model, batch, data and objective lines
  virtual int64_t tokens_per_sample() const = 0;  // for tokens/s and consumed tokens
  virtual double flops_per_sample() const = 0;    // forward + backward, for the MFU
  // The family's fields of state.json beside the common ones.
  virtual void add_checkpoint_meta(nlohmann::json& meta) const = 0;
  // The settings a checkpoint must share with the flags beyond the config (flat keys), as the flags
  // give them and as a checkpoint's state.json records them.
  virtual nlohmann::json model_options() const = 0;
  virtual nlohmann::json model_options_of(const nlohmann::json& meta) const = 0;

  // The --data-path prefix split by documents, as Megatron splits BERT and T5 data: make(data,
  // documents, split, num_samples) builds the train split's dataset (--train-iters global batches) and,
  // when evaluation is on, the valid split's (--eval-iters micro-batches), and gives its sample count.
  // Sets data_description_.
  using MakeSplit = std::function<int64_t(std::shared_ptr<const IndexedDataset>, SequenceRange, Split, int64_t)>;
  void build_splits(const MakeSplit& make);
  // metrics.jsonl on the writing rank; nothing elsewhere.
  void write_metrics(const nlohmann::json& j);

  TrainArgs args_;
  std::string family_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ParallelTraining> parallel_;  // groups, gradient reduction, checkpoints (parallel_training.h)
  std::unique_ptr<AdamW> optimizer_;
  int64_t iteration_ = 0;
  uint64_t consumed_samples_ = 0;
  std::string data_description_;

 private:
  struct Step {
    std::vector<double> parts;
    double grad_norm = 0, lr = 0;
  };
  // The sums of a log interval.
  struct Interval {
    std::vector<double> parts;
    int64_t steps = 0;
    Timer timer;
  };

  Step train_step();
  void log_interval(const Step& last, Interval& interval);
  bool save_or_exit(const Timer& run_timer);
  void save(int64_t iteration);
  void load();
  nlohmann::json checkpoint_meta() const;

  ParamStore* params_ = nullptr;
  MixedPrecision* precision_ = nullptr;
  std::string resumed_from_;
  StepGuard step_guard_;
  double peak_flops_ = 0;
  std::unique_ptr<JsonlWriter> metrics_;
};

}  // namespace megadlm
