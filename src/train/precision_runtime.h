#pragma once
// The trainer's side of mixed precision: applies the precision policy and the recomputation plan to
// the model, and under --fp16 runs the loss scaler around each optimizer step (scale the loss
// gradient, unscale and check the gradients, skip the step on overflow, advance the scale).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/language_model.h"
#include "optim/loss_scaler.h"
#include "train/metrics.h"
#include "train/precision_arguments.h"

namespace megadlm {

class PrecisionRuntime {
 public:
  PrecisionRuntime(const PrecisionArgs& args, LanguageModel& model);

  // The factor the loss gradient is multiplied by in forward_backward (the loss scale; 1 unless fp16).
  float grad_scale() const;
  // After the backward passes of a step, before the gradient norm: with --fp16 unscales the gradients
  // and returns true when some gradient overflowed (the step is then skipped and the scale backs off).
  bool overflowed();
  // Under bf16 products, per parameter id, the bf16 weight copies the optimizer may write on its pass
  // (empty otherwise).
  std::vector<uint16_t*> bf16_copy_targets();
  // After the step (taken or skipped): the weights' low-precision copies are remade at their next use
  // (unless the optimizer wrote the bf16 ones: bf16_copies_written) and the fp8 scales advance.
  void after_step(bool bf16_copies_written = false);

  int64_t overflow_skips() const { return overflow_skips_; }
  // For the startup log: which path the products run, and the recomputation.
  std::string describe() const;
  // " | loss scale 65536" under --fp16, else "".
  std::string log_suffix() const;
  void add_metrics(nlohmann::json& j) const;  // loss_scale, overflow_skips under --fp16
  // Once, after the first step: the measured arena high-water, precision buffers and peak RSS
  // (getrusage) beside the estimate printed at start.
  void report_memory_once(const MemoryEstimate& estimate);

 private:
  PrecisionArgs args_;
  LanguageModel& model_;
  std::unique_ptr<LossScaler> scaler_;
  int64_t overflow_skips_ = 0;
  bool memory_reported_ = false;
};

}  // namespace megadlm
