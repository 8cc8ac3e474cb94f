#include "optim/loss_scaler.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

LossScaler::LossScaler(const LossScalerConfig& cfg) : cfg_(cfg) {
  if (cfg.dynamic) {
    MEGADLM_CHECK(cfg.initial_scale > 0, "--initial-loss-scale must be positive, got ", cfg.initial_scale);
    MEGADLM_CHECK(cfg.min_scale > 0 && cfg.min_scale <= cfg.initial_scale, "--min-loss-scale ", cfg.min_scale,
                  " must be positive and at most --initial-loss-scale ", cfg.initial_scale);
    MEGADLM_CHECK(cfg.window >= 1, "--loss-scale-window must be at least 1, got ", cfg.window);
    MEGADLM_CHECK(cfg.hysteresis >= 1, "--hysteresis must be at least 1, got ", cfg.hysteresis);
    scale_ = cfg.initial_scale;
  } else {
    MEGADLM_CHECK(cfg.static_scale > 0, "--loss-scale must be positive, got ", cfg.static_scale);
    scale_ = cfg.static_scale;
  }
  hysteresis_tracker_ = cfg.hysteresis;
}

bool LossScaler::unscale_and_check(const Backend& be, float* grads, int64_t n) const {
  // One pass to check (a NaN or inf stays so after scaling), one to unscale only when it is needed.
  if (!be.all_finite(grads, n)) return false;
  be.scale_inplace(grads, static_cast<float>(1.0 / scale_), n);
  return true;
}

void LossScaler::update(bool found_inf) {
  if (!cfg_.dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * cfg_.backoff_factor, cfg_.min_scale);
    return;
  }
  growth_tracker_ += 1;
  if (growth_tracker_ == cfg_.window) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = cfg_.hysteresis;
    scale_ *= cfg_.growth_factor;
  }
}

void LossScaler::state(double& scale, int64_t& growth, int64_t& hysteresis) const {
  scale = scale_;
  growth = growth_tracker_;
  hysteresis = hysteresis_tracker_;
}

void LossScaler::set_state(double scale, int64_t growth, int64_t hysteresis) {
  scale_ = scale;
  growth_tracker_ = growth;
  hysteresis_tracker_ = hysteresis;
}

}  // namespace megadlm
