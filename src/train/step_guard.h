#pragma once
// Non-finite steps: a NaN or Inf loss or gradient norm skips the update (parameters, AdamW moments and
// step count untouched), is logged and counted, and --max-skipped-steps consecutive skips stop the run
// with an error before anything else is saved, so the last checkpoint written is the last good one.
// classify_step() is the one place that decides whether a step is applied; a loss scaler (fp16) that
// also skips on overflow records its skips through the same StepGuard.
#include <cstdint>
#include <string>

#include "core/parameters.h"
#include "optim/adamw.h"

namespace megadlm {

enum class StepSkip { None, NonFiniteLoss, NonFiniteGradNorm };

// The loss is looked at first: with a non-finite loss the gradient norm need not be computed (pass NaN).
StepSkip classify_step(double loss, double grad_norm);
const char* skip_reason(StepSkip s);  // "" for None

// The name of the first parameter holding a NaN or Inf in its value or (with an optimizer that holds
// them: not under the distributed optimizer) its AdamW moments, or "" when all are finite. The
// trainer refuses to save such a state: skipped steps leave the weights as they were, so this only
// fires on weights poisoned some other way, and the last good checkpoint must not be replaced by them.
std::string first_non_finite_parameter(const ParamStore& params, const AdamW* optimizer);

class StepGuard {
 public:
  // max_consecutive: the number of consecutive skips that stops the run; 0 = never stop.
  explicit StepGuard(int64_t max_consecutive) : max_consecutive_(max_consecutive) {}

  // Records the outcome of the step that computed `iteration` (from 1). A skip logs one line and is
  // counted; a good step resets the consecutive count. Throws Error naming --max-skipped-steps when
  // this skip makes max_consecutive in a row.
  void record(StepSkip s, int64_t iteration, double loss, double grad_norm);

  int64_t total() const { return total_; }
  int64_t consecutive() const { return consecutive_; }

 private:
  int64_t max_consecutive_;
  int64_t total_ = 0, consecutive_ = 0;
};

}  // namespace megadlm
