#pragma once
// The training loop of pretrain_difflm: data -> objective -> forward/backward over micro-batches (the
// 1F1B schedule under pipeline parallelism) -> gradient reduction over the data-parallel ranks -> clip
// -> AdamW -> log, evaluate, checkpoint. Any parallel layout (train/parallel_training.h); the model type
// shows only in the objective and the model spec it was built from.
#include <functional>
#include <memory>
#include <string>

#include "core/log.h"
#include "data/loader.h"
#include "models/language_model.h"
#include "objectives/objective.h"
#include "optim/adamw.h"
#include "tokenizers/tokenizer.h"
#include "train/arguments.h"
#include "train/data_setup.h"
#include "train/metrics.h"
#include "train/moe_metrics.h"
#include "train/parallel_training.h"
#include "train/precision_runtime.h"
#include "train/signals.h"
#include "train/step_guard.h"
#include "train/tensorboard_log.h"

namespace megadlm {

struct EvalResult {
  double loss = 0;   // mean loss per micro-batch (DLM: the negative ELBO bound per token)
  double ppl = 0;    // exp(loss) (DLM: a perplexity upper bound)
  int64_t batches = 0;
};

class Trainer {
 public:
  explicit Trainer(const TrainArgs& args);
  ~Trainer();
  // Runs to --train-iters (or an exit condition). Returns the last iteration reached.
  int64_t run();

  EvalResult evaluate(const TokenDataset& data, int64_t batches);
  LanguageModel& model() { return *model_; }
  AdamW& optimizer() { return *optimizer_; }
  int64_t skipped_steps() const { return step_guard_.total(); }
  // Test hook: called in every step after the backward passes and before the update, with the
  // iteration being computed (from 1). Tests use it to poison a gradient and see the step skipped.
  void set_after_backward_hook(std::function<void(int64_t iteration, Trainer&)> hook) {
    after_backward_hook_ = std::move(hook);
  }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int32_t mask_token() const { return mask_token_; }

 private:
  // What one step leaves for the log: its loss and gradient norm (NaN when skipped), its learning rate
  // and what its micro-batches held, over every data-parallel rank.
  struct Step {
    double loss = 0, grad_norm = 0, lr = 0;
    ObjectiveStats stats;
    std::vector<MoELayerReport> moe;  // this rank's MoE layers' statistics of the step
  };
  // The sums of a log interval: reset after each log line.
  struct Interval {
    double loss = 0;
    int64_t steps = 0;
    ObjectiveStats stats;
    std::vector<MoELayerReport> moe;
    Timer timer;
    Interval& operator+=(const Step& s) {
      loss += s.loss;
      ++steps;
      stats += s.stats;
      add_moe_layers(moe, s.moe);
      return *this;
    }
  };

  void print_header() const;
  // One optimizer step over this rank's M micro-batches from the loader: forward and backward, the
  // reduction, the update (or the skip of a non-finite step).
  Step train_step(BatchLoader& loader, int64_t M);
  void log_interval(const Step& last, Interval& interval, double tokens_per_step, double flops_per_token);
  void log_tensorboard(const Step& step);
  void evaluate_and_log(int64_t iteration);
  // Saves when --save-interval, the last iteration or an exit asks; true when the run must stop
  // (--exit-interval, --exit-duration-in-mins, a signal), decided alike on every rank.
  bool save_or_exit(const Timer& run_timer);
  void save(int64_t iteration);
  void load();
  // Refuses a --save directory whose checkpoints this run would replace without resuming from them.
  void check_save_dir() const;
  nlohmann::json checkpoint_meta() const;
  // --model-type llava: --freeze-vision-model / --freeze-language-model on the optimizer and the tower
  // (the tower and projector live on the first pipeline stage); the images of a batch's samples into
  // the micro-batch prepared from it (none on a stage without the tower).
  void freeze_llava_parts();
  void load_images(const TokenDataset& data, const SampleBatch& batch, MicroBatch& mb);

  TrainArgs args_;
  // --exit-signal-handler: installed first, so that every thread the trainer starts (OpenMP workers,
  // the data loader) inherits the blocked signals; restored when the Trainer goes (signals.h).
  ExitSignalScope exit_signals_;
  std::unique_ptr<Tokenizer> tokenizer_;
  int32_t mask_token_ = -1, eod_ = -1;
  nlohmann::json image_processor_;  // --model-type llava: the training data's (its image sidecar's) settings
  Datasets data_;
  std::unique_ptr<Objective> objective_, eval_objective_;
  MemoryEstimate memory_;  // of the model at --micro-batch-size, checked against the host's memory
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<ParallelTraining> parallel_;  // groups, gradient reduction, global norm (parallel_training.h)
  std::unique_ptr<PrecisionRuntime> precision_;  // --bf16 / --fp16 / --fp8-format, --recompute-*
  int64_t iteration_ = 0;
  uint64_t consumed_samples_ = 0;
  std::string resumed_from_;  // the checkpoint directory a resume loaded ("" for a new run or --finetune)
  StepGuard step_guard_;  // non-finite steps: skip, count, stop after --max-skipped-steps in a row
  std::function<void(int64_t, Trainer&)> after_backward_hook_;
  double peak_flops_ = 0;
  bool peak_is_bf16_ = false;  // the peak is the bf16 products' rate
  int gpu_index_ = 0;  // the node's GPU this rank drives (select_device), on a device
  std::unique_ptr<JsonlWriter> metrics_;
  std::unique_ptr<TensorBoardLog> tensorboard_;  // --tensorboard-dir, on the rank that writes files
  MicroBatch micro_batch_;  // the storage every training micro-batch is prepared into
};

}  // namespace megadlm
