#pragma once
// What a model is trained to do, as one interface: an objective turns the loader's samples into the
// model's micro-batch (inputs, positions, document segments, targets, per-token weights), says what the
// log shows of it, and how evaluation reads its loss. The trainer holds one and never asks which.
// Implemented by NextToken (autoregressive) and MaskedDiffusion (objectives/*.h).
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/sample_batch.h"
#include "models/micro_batch.h"

namespace megadlm {

// What the prepared micro-batches held, summed over micro-batches (and ranks) for the log.
struct ObjectiveStats {
  double loss_tokens = 0;  // tokens that carry loss (the masked tokens of a diffusion batch)
  double real_tokens = 0;  // tokens that are not padding
  double sum_t = 0;        // diffusion: the sum of the sequences' noise levels
  double sequences = 0;

  ObjectiveStats& operator+=(const ObjectiveStats& o) {
    loss_tokens += o.loss_tokens;
    real_tokens += o.real_tokens;
    sum_t += o.sum_t;
    sequences += o.sequences;
    return *this;
  }
};

// The diffusion objectives' log fields, " | mean t 0.503 | masked 0.497" (the mean noise level and the
// masked fraction of the real tokens), and the same as metrics (mean_t, masked_fraction).
std::string diffusion_log_fields(const ObjectiveStats& s);
void add_diffusion_metrics(const ObjectiveStats& s, nlohmann::json& j);

class Objective {
 public:
  virtual ~Objective() = default;

  // samples [B, T+1] -> out: every array of B*T entries (segment_ids empty unless documents are
  // separated), targets kIgnoreIndex where no loss, weights that sum the micro-batch's loss with
  // micro_batch_weight folded in, out.weight = micro_batch_weight. Reuses out's storage.
  virtual ObjectiveStats prepare(const SampleBatch& samples, float micro_batch_weight, MicroBatch& out) const = 0;
  // The objective that evaluation runs: the same loss, drawn so that it never repeats the training
  // draws and is comparable from one evaluation to the next.
  virtual std::unique_ptr<Objective> for_evaluation() const = 0;

  // One line for the run's header.
  virtual std::string describe() const = 0;
  // What the log line and metrics.jsonl show of an interval's statistics, besides the loss.
  virtual std::string log_fields(const ObjectiveStats& interval) const = 0;
  virtual void add_metrics(const ObjectiveStats& interval, nlohmann::json& j) const = 0;
  // The name of exp(validation loss): a perplexity, or the bound a diffusion loss gives.
  virtual const char* perplexity_name() const = 0;
};

}  // namespace megadlm
