#pragma once
// Learning-rate schedules with Megatron's semantics (OptimizerParamScheduler): linear warm-up from 0
// over warmup_iters, then decay from lr to min_lr over decay_iters (default: the training iterations)
// with the chosen style; WSD holds lr until the last wsd_decay_iters of the decay window, then anneals.
#include <cstdint>
#include <string>

namespace megadlm {

enum class LrDecayStyle : uint8_t { Constant, Linear, Cosine, InverseSquareRoot, WSD };
enum class WsdDecayStyle : uint8_t { Exponential, Linear, Cosine };
LrDecayStyle lr_decay_style_from_name(const std::string& name);
WsdDecayStyle wsd_decay_style_from_name(const std::string& name);

struct LrSchedule {
  double lr = 1e-4;
  double min_lr = 0.0;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;  // iterations over which to decay (Megatron's lr_decay_iters)
  LrDecayStyle style = LrDecayStyle::Linear;
  int64_t wsd_decay_iters = 0;
  WsdDecayStyle wsd_style = WsdDecayStyle::Exponential;

  double at(int64_t iteration) const;  // iteration counts from 0 (the first update uses at(0)... see .cpp)
};

}  // namespace megadlm
