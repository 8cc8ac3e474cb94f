#pragma once
// pretrain_difflm's precision and recomputation flags (Megatron's names): --bf16, --fp16 with loss
// scaling, --fp8-format with delayed scaling, --recompute-*. Declared and read here so that
// arguments.cpp only calls these two functions.
#include <string>

#include "core/tensor.h"
#include "core/cli_flags.h"
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

// --bf16's product path. bf16 products where they are the fast path: on a device, and on a CPU whose
// oneDNN bf16 matmul runs clearly faster than its fp32 one (at least kBf16ProductsMinSpeedup times the
// rate, both measured at start: Backend::peak_gemm_flops). Elsewhere --bf16 keeps fp32 products with the
// saved activations in bf16, as Megatron's storage-only mode does: on an AVX2-only CPU oneDNN has no
// bf16 matmul (bf16 products would run widened to fp32), and a CPU with AVX512-BF16 but no AMX can run
// bf16 products slower than fp32 ones. --bf16-storage-only and --bf16-products force one path.
struct Bf16Path {
  bool products = true;
  std::string note;  // set when the path was chosen for the CPU rather than by a flag
};
// The CPU's measured GEMM rates in FLOP/s (Backend::peak_gemm_flops); bf16 = 0 where oneDNN has no bf16
// matmul.
struct CpuGemmRates {
  double fp32 = 0, bf16 = 0;
};
// The margin keeps the choice away from noise: the ratios measured on the CPUs this ran on lie far on
// either side of it (docs/bench/decisions.md).
constexpr double kBf16ProductsMinSpeedup = 1.2;
Bf16Path choose_bf16_path(bool storage_only_flag, bool products_flag, Device device, const CpuGemmRates& cpu);
// The rates choose_bf16_path takes on this CPU: measured once per process (the CPU backend); under MPI
// rank 0's, broadcast, so that every rank takes the same path (they multiply the same bits).
CpuGemmRates measure_cpu_gemm_rates();

void declare_precision_flags(CliFlags& f);
inline MemoryOptions memory_options(const PrecisionArgs& a) { return MemoryOptions{a.precision, a.recompute}; }
// Throws an Error naming the flag at fault (two precisions at once, a bad value).
// device: where the model runs (--device), for the bf16 path.
void read_precision_flags(const CliFlags& f, PrecisionArgs& out, Device device = Device::CPU);

}  // namespace megadlm
