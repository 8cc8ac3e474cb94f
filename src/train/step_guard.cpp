// Skip decisions and the consecutive-skip limit: see step_guard.h.
#include "train/step_guard.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace megadlm {

StepSkip classify_step(double loss, double grad_norm) {
  if (!std::isfinite(loss)) return StepSkip::NonFiniteLoss;
  if (!std::isfinite(grad_norm)) return StepSkip::NonFiniteGradNorm;
  return StepSkip::None;
}

const char* skip_reason(StepSkip s) {
  switch (s) {
    case StepSkip::NonFiniteLoss: return "non-finite loss";
    case StepSkip::NonFiniteGradNorm: return "non-finite gradient norm";
    case StepSkip::None: break;
  }
  return "";
}

static bool all_finite(const float* x, int64_t n) {
  // Summing x * 0 turns any NaN or Inf into a NaN and everything else into 0: one vectorisable pass.
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += x[i] * 0.0f;
  return acc == 0.0f;
}

std::string first_non_finite_parameter(const ParamStore& params, const AdamW* optimizer) {
  auto* opt = const_cast<AdamW*>(optimizer);  // the moment accessors are not const; only read here
  // On a device: host copies of the three buffers (a checkpoint downloads them anyway).
  Tensor values = Tensor::borrow(const_cast<float*>(params.values()), {params.numel()}, DType::F32, params.device());
  Tensor m, v;
  if (opt && opt->has_state()) m = opt->exp_avg(), v = opt->exp_avg_sq();
  if (params.device() != Device::CPU) {
    auto to_host = [](const Tensor& t) {
      Tensor h = Tensor::empty(t.shape(), t.dtype());
      h.copy_from(t);
      return h;
    };
    values = to_host(values);
    if (m.raw()) m = to_host(m), v = to_host(v);
  }
  for (const ParamInfo& p : params.infos()) {
    const int64_t n = p.shape.numel();
    if (!all_finite(values.data<float>() + p.offset, n)) return p.name;
    if (m.raw() && (!all_finite(m.data<float>() + p.offset, n) || !all_finite(v.data<float>() + p.offset, n)))
      return p.name + " (AdamW state)";
  }
  return "";
}

void StepGuard::record(StepSkip s, int64_t iteration, double loss, double grad_norm) {
  if (s == StepSkip::None) {
    consecutive_ = 0;
    return;
  }
  ++total_;
  ++consecutive_;
  log_info("iteration ", iteration, ": ", skip_reason(s), " (loss ", loss, ", grad norm ", grad_norm,
           "): update skipped, parameters and optimizer state unchanged (", consecutive_, " in a row, ", total_,
           " in this run)");
  MEGADLM_CHECK(max_consecutive_ <= 0 || consecutive_ < max_consecutive_, "iteration ", iteration, ": ", consecutive_,
                " consecutive steps skipped for a non-finite loss or gradient norm (--max-skipped-steps ",
                max_consecutive_, "): stopping without saving; the last checkpoint written is the last good one");
}

}  // namespace megadlm
