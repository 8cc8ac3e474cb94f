#include "train/precision_runtime.h"

#include <sys/resource.h>

#include <cstdio>

#include "core/log.h"
#include "kernels/backend.h"

namespace megadlm {

PrecisionRuntime::PrecisionRuntime(const PrecisionArgs& args, LanguageModel& model) : args_(args), model_(model) {
  model_.set_precision(args_.precision);
  model_.set_recompute(args_.recompute);
  if (args_.precision.mode == PrecisionMode::FP16) scaler_ = std::make_unique<LossScaler>(args_.loss_scale);
}

float PrecisionRuntime::grad_scale() const { return scaler_ ? static_cast<float>(scaler_->scale()) : 1.0f; }

bool PrecisionRuntime::overflowed() {
  if (!scaler_) return false;
  ParamStore& p = model_.params();
  const bool finite = scaler_->unscale_and_check(backend_for(p.device()), p.grads(), p.numel());
  if (!finite) {
    ++overflow_skips_;
    log_info("fp16: gradient overflow at loss scale ", scaler_->scale(), ", skipping the step");
  }
  scaler_->update(!finite);
  return !finite;
}

std::vector<uint16_t*> PrecisionRuntime::bf16_copy_targets() {
  return model_.precision() ? model_.precision()->bf16_copy_targets() : std::vector<uint16_t*>{};
}

void PrecisionRuntime::after_step(bool bf16_copies_written) {
  if (model_.precision()) model_.precision()->weights_updated(bf16_copies_written);
}

std::string PrecisionRuntime::describe() const {
  std::string s = describe_precision(args_.precision);
  if (!args_.bf16_path_note.empty()) s += "; " + args_.bf16_path_note;
  if (model_.precision() && model_.precision()->fp8_products())
    s += "; on this device the Linear products multiply the fp8 codes (Backend::gemm_fp8)";
  if (scaler_) {
    char buf[160];
    if (args_.loss_scale.dynamic)
      std::snprintf(buf, sizeof buf, "; dynamic loss scale from %.0f (min %g, window %lld, hysteresis %lld)",
                    args_.loss_scale.initial_scale, args_.loss_scale.min_scale,
                    static_cast<long long>(args_.loss_scale.window), static_cast<long long>(args_.loss_scale.hysteresis));
    else
      std::snprintf(buf, sizeof buf, "; static loss scale %g", args_.loss_scale.static_scale);
    s += buf;
  }
  if (args_.recompute.granularity != RecomputeGranularity::None) s += "; recompute " + describe_recompute(args_.recompute);
  return s;
}

std::string PrecisionRuntime::log_suffix() const {
  if (!scaler_) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, " | loss scale %.1f", scaler_->scale());
  return buf;
}

void PrecisionRuntime::add_metrics(nlohmann::json& j) const {
  if (!scaler_) return;
  j["loss_scale"] = scaler_->scale();
  j["overflow_skips"] = overflow_skips_;
}

void PrecisionRuntime::report_memory_once(const MemoryEstimate& est) {
  if (memory_reported_) return;
  memory_reported_ = true;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double rss = static_cast<double>(ru.ru_maxrss) * 1024.0;  // Linux reports KiB
  const double arena = model_.activation_high_water();
  const double buffers = model_.precision() ? model_.precision()->buffer_bytes() : 0.0;
  log_info("memory after the first step: activations high-water ", human_bytes(arena), " (estimate ",
           human_bytes(est.activations_bytes), "), precision buffers ", human_bytes(buffers), " (estimate ",
           human_bytes(est.precision_bytes), "), weights+grads+AdamW ", human_bytes(est.params_bytes),
           "; measured total ", human_bytes(arena + buffers + est.params_bytes), " vs estimate ", human_bytes(est.total()),
           "; peak RSS ", human_bytes(rss));
}

}  // namespace megadlm
