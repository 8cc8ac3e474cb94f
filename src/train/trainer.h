#pragma once
// The training loop of pretrain_difflm: data -> objective -> forward/backward over micro-batches ->
// clip -> AdamW -> log, evaluate, checkpoint. One process, one pipeline stage for now.
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "models/language_model.h"
#include "objectives/batch.h"
#include "optim/adamw.h"
#include "train/arguments.h"
#include "train/data_setup.h"
#include "train/metrics.h"

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
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int32_t mask_token() const { return mask_token_; }

 private:
  void print_header() const;
  void prepare(const SampleBatch& samples, float micro_batch_weight, bool eval, PreparedBatch& out) const;
  void save(int64_t iteration);
  void load();
  nlohmann::json checkpoint_meta() const;

  TrainArgs args_;
  std::unique_ptr<Tokenizer> tokenizer_;
  int32_t mask_token_ = -1, eod_ = -1;
  Datasets data_;
  std::unique_ptr<LanguageModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  int64_t iteration_ = 0;
  uint64_t consumed_samples_ = 0;
  int64_t skipped_steps_ = 0;
  double peak_flops_ = 0;
  std::unique_ptr<JsonlWriter> metrics_;
};

}  // namespace megadlm
