#pragma once
// pretrain_difflm's precision and recomputation flags (Megatron's names): --bf16, --fp16 with loss
// scaling, --fp8-format with delayed scaling, --recompute-*. Declared and read here so that
// arguments.cpp only calls these two functions.
#include <string>

#include "core/tensor.h"
#include "data/cli_flags.h"
#include "nn/precision.h"
#include "nn/recompute.h"
#include "optim/loss_scaler.h"
#include "train/activation_memory.h"

namespace megadlm {

struct PrecisionArgs {
  PrecisionConfig precision;  // mode, bf16 path, fp8 recipe
  std::string bf16_path_note;  // why --bf16 took fp32 products on its own (for the log); empty otherwise
  LossScalerConfig loss_scale;  // used with --fp16
  RecomputeConfig recompute;
};

// --bf16's product path. bf16 products where they are the fast path: on a device, and on a CPU where
// oneDNN has a bf16 matmul (cpu_bf16_matmul: cpu::has_bf16_matmul()). Elsewhere (an AVX2-only CPU) they
// would run as widened fp32 products, slower than the fp32 products themselves, so --bf16 keeps fp32
// products with the saved activations in bf16, as the issue and Megatron's storage-only mode allow.
// --bf16-storage-only and --bf16-products force one path.
struct Bf16Path {
  bool products = true;
  std::string note;  // set when the path was chosen for the CPU rather than by a flag
};
Bf16Path choose_bf16_path(bool storage_only_flag, bool products_flag, Device device, bool cpu_bf16_matmul);

void declare_precision_flags(CliFlags& f);
inline MemoryOptions memory_options(const PrecisionArgs& a) { return MemoryOptions{a.precision, a.recompute}; }
// Throws an Error naming the flag at fault (two precisions at once, a bad value).
// device: where the model runs (--device), for the bf16 path.
void read_precision_flags(const CliFlags& f, PrecisionArgs& out, Device device = Device::CPU);

}  // namespace megadlm
