#pragma once
// Loss scaling for --fp16 (Megatron's ConstantGradScaler / DynamicGradScaler). The loss gradient is
// multiplied by scale() so that small gradients survive fp16; before the optimizer step the gradients
// are multiplied by 1/scale() and checked: an inf or NaN anywhere means the step is skipped.
//
// Dynamic state machine (per optimizer step):
//   overflow: the step is skipped; growth counter := 0; hysteresis counter -= 1, and when it reaches
//             0 the scale backs off: scale := max(scale * backoff_factor, min_scale).
//   no overflow: growth counter += 1; after `window` clean steps in a row the scale grows
//             (scale *= growth_factor), the growth counter restarts and the hysteresis counter is
//             refilled.
// A static scale (--loss-scale) never changes; an overflow still skips the step.
#include <cstdint>

namespace megadlm {

struct LossScalerConfig {
  bool dynamic = true;
  double initial_scale = 4294967296.0;  // --initial-loss-scale, 2^32 as Megatron
  double min_scale = 1.0;               // --min-loss-scale
  int64_t window = 1000;                // --loss-scale-window
  int64_t hysteresis = 2;               // --hysteresis
  double static_scale = 0;              // --loss-scale (dynamic = false)
  double growth_factor = 2.0, backoff_factor = 0.5;
};

class Backend;

class LossScaler {
 public:
  LossScaler() = default;
  explicit LossScaler(const LossScalerConfig& cfg);

  double scale() const { return scale_; }
  // Unscales the flat gradient buffer grads [n] (on be's device) in place and returns whether every
  // value is finite. Then call update() with the answer.
  bool unscale_and_check(const Backend& be, float* grads, int64_t n) const;
  // Advances the state machine after a step; found_inf = some gradient overflowed (step skipped).
  void update(bool found_inf);

  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t hysteresis_tracker() const { return hysteresis_tracker_; }
  // For checkpoints: {scale, growth_tracker, hysteresis_tracker}.
  void state(double& scale, int64_t& growth, int64_t& hysteresis) const;
  void set_state(double scale, int64_t growth, int64_t hysteresis);

 private:
  LossScalerConfig cfg_;
  double scale_ = 1.0;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_ = 0;
};

}  // namespace megadlm
