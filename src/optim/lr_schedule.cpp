#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace megadlm {

LrDecayStyle lr_decay_style_from_name(const std::string& n) {
  if (n == "constant") return LrDecayStyle::Constant;
  if (n == "linear") return LrDecayStyle::Linear;
  if (n == "cosine") return LrDecayStyle::Cosine;
  if (n == "inverse-square-root") return LrDecayStyle::InverseSquareRoot;
  if (n == "WSD" || n == "wsd") return LrDecayStyle::WSD;
  fail("--lr-decay-style: unknown value '", n, "' (expected constant, linear, cosine, inverse-square-root or WSD)");
}

WsdDecayStyle wsd_decay_style_from_name(const std::string& n) {
  if (n == "exponential") return WsdDecayStyle::Exponential;
  if (n == "linear") return WsdDecayStyle::Linear;
  if (n == "cosine") return WsdDecayStyle::Cosine;
  fail("--lr-wsd-decay-style: unknown value '", n, "' (expected exponential, linear or cosine)");
}

// `step` is the number of updates already taken plus one (Megatron increments before computing).
double LrSchedule::at(int64_t step) const {
  if (warmup_iters > 0 && step <= warmup_iters)
    return lr * static_cast<double>(step) / static_cast<double>(warmup_iters);
  if (style == LrDecayStyle::Constant) return lr;
  // Past the decay window every decaying style sits at min_lr (inverse-square-root too, as Megatron).
  if (step > decay_iters) return min_lr;
  if (style == LrDecayStyle::InverseSquareRoot) {
    const double w = static_cast<double>(std::max<int64_t>(warmup_iters, 1));
    return std::max(min_lr, lr * std::sqrt(w) / std::sqrt(static_cast<double>(std::max<int64_t>(step, 1))));
  }
  const double span = static_cast<double>(std::max<int64_t>(decay_iters - warmup_iters, 1));
  const double ratio = std::clamp(static_cast<double>(step - warmup_iters) / span, 0.0, 1.0);
  double coeff = 0.0;  // 1 -> lr, 0 -> min_lr
  switch (style) {
    case LrDecayStyle::Linear: coeff = 1.0 - ratio; break;
    case LrDecayStyle::Cosine: coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0); break;
    case LrDecayStyle::WSD: {
      const int64_t anneal_start = decay_iters - wsd_decay_iters;
      if (step <= anneal_start) {
        coeff = 1.0;
      } else {
        const double r = static_cast<double>(step - anneal_start) / static_cast<double>(std::max<int64_t>(wsd_decay_iters, 1));
        switch (wsd_style) {
          case WsdDecayStyle::Linear: coeff = 1.0 - r; break;
          case WsdDecayStyle::Cosine: coeff = 0.5 * (std::cos(M_PI * r) + 1.0); break;
          case WsdDecayStyle::Exponential: coeff = 2.0 * std::pow(0.5, r) - 1.0; break;
        }
      }
      break;
    }
    default: break;
  }
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace megadlm
