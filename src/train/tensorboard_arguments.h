#pragma once
// pretrain_difflm's TensorBoard flags (Megatron's names and defaults): declared and read here so that
// arguments.cpp only calls these two functions. What each flag writes: docs/training_brown.md
// ("Watching a run in TensorBoard") and train/tensorboard_log.h.
#include <cstdint>
#include <string>

#include "core/cli_flags.h"

namespace megadlm {

struct TensorBoardArgs {
  std::string dir;              // --tensorboard-dir ("" = no event files)
  int64_t log_interval = 1;     // --tensorboard-log-interval: training scalars every that many iterations
  bool validation_ppl = false;  // --log-validation-ppl-to-tensorboard
  bool timers = false;          // --log-timers-to-tensorboard: iteration-time at each log line
  bool throughput = false;      // --log-throughput: with timers, throughput (TFLOP/s per rank)
  bool loss_scale = true;       // off with --no-log-loss-scale-to-tensorboard
  bool world_size = false;      // --log-world-size-to-tensorboard
  bool enabled() const { return !dir.empty(); }
};

void declare_tensorboard_flags(CliFlags& f);
// Throws an Error naming the flag at fault.
TensorBoardArgs read_tensorboard_flags(const CliFlags& f);

}  // namespace megadlm
