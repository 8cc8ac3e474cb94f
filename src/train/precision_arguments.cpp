#include "train/precision_arguments.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "kernels/backend.h"
#include "parallel/mpi_communicator.h"
#include "train/metrics.h"

namespace megadlm {

void declare_precision_flags(CliFlags& f) {
  f.add_bool("bf16",
             "bf16 mixed precision: bf16 matrix products with fp32 accumulation and master weights (on a CPU whose "
             "bf16 products are not clearly faster than fp32 ones, fp32 products with bf16 storage; the log says which)");
  f.add_bool("bf16-storage-only",
             "with --bf16: keep fp32 products, store only the saved Linear inputs in bf16 (the default on CPUs where bf16 "
             "products are not clearly faster than fp32)");
  f.add_bool("bf16-products",
             "with --bf16: bf16 matrix products even on a CPU where they are slower than fp32 ones, or run widened to "
             "fp32 without a bf16 matmul in oneDNN (by default --bf16 keeps fp32 products there)");
  f.add_bool("fp16", "fp16 mixed precision (products emulated in fp32 on fp16 values) with loss scaling");
  f.add_double("loss-scale", 0, "--fp16: static loss scale (default: dynamic)", at_least(0));
  f.add_double("initial-loss-scale", 4294967296.0, "--fp16: initial dynamic loss scale (2^32)", above(0));
  f.add_double("min-loss-scale", 1.0, "--fp16: minimum dynamic loss scale", above(0));
  f.add_int("loss-scale-window", 1000, "--fp16: clean steps before the dynamic loss scale doubles", at_least(1));
  f.add_int("hysteresis", 2, "--fp16: overflows tolerated before the dynamic loss scale halves", at_least(1));
  f.add_string("fp8-format", "", "fp8 products (emulated on CPU): e4m3 or hybrid (e4m3 forward, e5m2 gradients)");
  f.add_int("fp8-margin", 0, "fp8 scaling margin: scale = (fp8 max / amax) / 2^margin", at_least(0));
  f.add_int("fp8-amax-history-len", 1, "fp8: steps of amax history per tensor", at_least(1));
  f.add_string("fp8-amax-compute-algo", "most_recent", "fp8: amax from the history by max or most_recent");
  f.add_string("recompute-granularity", "", "activation recomputation: full or selective");
  f.add_string("recompute-method", "uniform", "full recomputation: uniform (groups of layers) or block (first layers)");
  f.add_int("recompute-num-layers", 1, "full recomputation: layers per group (uniform) or layers recomputed (block)", at_least(1));
}

Bf16Path choose_bf16_path(bool storage_only_flag, bool products_flag, Device device, const CpuGemmRates& cpu) {
  MEGADLM_CHECK(!(storage_only_flag && products_flag), "--bf16-storage-only and --bf16-products cannot be given together");
  Bf16Path path;
  if (storage_only_flag || products_flag) {
    path.products = products_flag;
    return path;
  }
  if (device != Device::CPU || cpu.bf16 >= kBf16ProductsMinSpeedup * cpu.fp32) return path;
  path.products = false;
  if (cpu.bf16 <= 0) {
    path.note =
        "fp32 products: oneDNN has no bf16 matmul on this CPU (it needs AVX-512), where bf16 products would run "
        "widened to fp32, slower than fp32 products (--bf16-products forces them)";
    return path;
  }
  char note[256];
  std::snprintf(note, sizeof note,
                "fp32 products: oneDNN's bf16 matmul on this CPU runs at %.1f GFLOP/s against %.1f in fp32 (%.2fx; "
                "bf16 products need %.2gx), measured at start (--bf16-products forces them)",
                cpu.bf16 / 1e9, cpu.fp32 / 1e9, cpu.bf16 / cpu.fp32, kBf16ProductsMinSpeedup);
  path.note = note;
  return path;
}

CpuGemmRates measure_cpu_gemm_rates() {
  const Backend& cpu = cpu_backend();
  double rates[2] = {cpu.peak_gemm_flops(false), cpu.bf16_products() ? cpu.peak_gemm_flops(true) : 0.0};
  world_communicator()->broadcast(rates, sizeof rates, 0);
  return {rates[0], rates[1]};
}

void read_precision_flags(const CliFlags& f, PrecisionArgs& a, Device device) {
  const bool bf16 = f.get_bool("bf16"), fp16 = f.get_bool("fp16");
  const std::string fp8 = f.get_string("fp8-format");
  MEGADLM_CHECK(!(bf16 && fp16), "--bf16 and --fp16 cannot be given together");
  MEGADLM_CHECK(!f.get_bool("bf16-storage-only") || bf16, "--bf16-storage-only needs --bf16");
  MEGADLM_CHECK(!f.get_bool("bf16-products") || bf16, "--bf16-products needs --bf16");
  PrecisionConfig& p = a.precision;
  if (bf16) p.mode = PrecisionMode::BF16;
  if (fp16) p.mode = PrecisionMode::FP16;
  if (bf16 && fp8.empty()) {
    const bool storage = f.get_bool("bf16-storage-only"), products = f.get_bool("bf16-products");
    // The probe asks oneDNN only when the choice is the CPU's to make.
    const bool ask = !storage && !products && device == Device::CPU;
    const Bf16Path path = choose_bf16_path(storage, products, device, ask ? measure_cpu_gemm_rates() : CpuGemmRates{});
    p.bf16_products = path.products;
    a.bf16_path_note = path.note;
  }
  if (!fp8.empty()) {
    // Megatron runs fp8 inside a bf16 or fp16 model; here the fp8 emulation replaces the products'
    // precision, and everything else is fp32 either way.
    MEGADLM_CHECK(!fp16, "--fp8-format with --fp16 is not available (use --fp8-format with --bf16 or alone)");
    p.mode = PrecisionMode::FP8;
    p.fp8.format = fp8_format_from_name(fp8);
    p.fp8.margin = static_cast<int>(f.get_int("fp8-margin"));
    p.fp8.amax_history_len = f.get_int("fp8-amax-history-len");
    p.fp8.amax_algo = fp8_amax_algo_from_name(f.get_string("fp8-amax-compute-algo"));
  }
  LossScalerConfig& s = a.loss_scale;
  s.dynamic = f.get_double("loss-scale") <= 0;
  s.static_scale = f.get_double("loss-scale");
  // The default is exactly 2^32 (the flag's default as text would round it): a power of two keeps
  // scaling and unscaling exact.
  s.initial_scale = f.given("initial-loss-scale") ? f.get_double("initial-loss-scale") : 4294967296.0;
  s.min_scale = f.get_double("min-loss-scale");
  s.window = f.get_int("loss-scale-window");
  s.hysteresis = f.get_int("hysteresis");
  if (fp16) LossScaler check(s);  // validates the values, naming the flag at fault
  RecomputeConfig& r = a.recompute;
  r.granularity = recompute_granularity_from_name(f.get_string("recompute-granularity"));
  r.method = recompute_method_from_name(f.get_string("recompute-method"));
  r.num_layers = f.get_int("recompute-num-layers");
}

}  // namespace megadlm
