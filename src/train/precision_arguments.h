#pragma once
// pretrain_difflm's precision and recomputation flags (Megatron's names): --bf16, --fp16 with loss
// scaling, --fp8-format with delayed scaling, --recompute-*. Declared and read here so that
// arguments.cpp only calls these two functions.
#include "data/cli_flags.h"
#include "nn/precision.h"
#include "nn/recompute.h"
#include "optim/loss_scaler.h"
#include "train/activation_memory.h"

namespace megadlm {

struct PrecisionArgs {
  PrecisionConfig precision;  // mode, bf16 path, fp8 recipe
  LossScalerConfig loss_scale;  // used with --fp16
  RecomputeConfig recompute;
};

void declare_precision_flags(CliFlags& f);
inline MemoryOptions memory_options(const PrecisionArgs& a) { return MemoryOptions{a.precision, a.recompute}; }
// Throws an Error naming the flag at fault (two precisions at once, a bad value).
void read_precision_flags(const CliFlags& f, PrecisionArgs& out);

}  // namespace megadlm
