// The precision and recomputation flags as pretrain_difflm reads them (train/precision_arguments.h).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "train/precision_arguments.h"

namespace megadlm {
namespace {

PrecisionArgs parse(const std::vector<std::string>& args) {
  CliFlags f("test", "test");
  declare_precision_flags(f);
  f.parse(args);
  PrecisionArgs a;
  read_precision_flags(f, a);
  return a;
}

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PrecisionFlags, DefaultsAreFp32AndMegatrons) {
  const PrecisionArgs a = parse({});
  EXPECT_EQ(a.precision.mode, PrecisionMode::FP32);
  EXPECT_EQ(a.recompute.granularity, RecomputeGranularity::None);
  const PrecisionArgs h = parse({"--fp16"});
  EXPECT_EQ(h.precision.mode, PrecisionMode::FP16);
  EXPECT_TRUE(h.loss_scale.dynamic);
  EXPECT_EQ(h.loss_scale.initial_scale, 4294967296.0) << "exactly 2^32";
  EXPECT_EQ(h.loss_scale.window, 1000);
  EXPECT_EQ(h.loss_scale.hysteresis, 2);
  const PrecisionArgs e = parse({"--fp8-format", "hybrid"});
  EXPECT_EQ(e.precision.mode, PrecisionMode::FP8);
  EXPECT_EQ(e.precision.fp8.amax_history_len, 1);
  EXPECT_EQ(e.precision.fp8.amax_algo, Fp8AmaxAlgo::MostRecent);
}

TEST(PrecisionFlags, ValuesAreRead) {
  const PrecisionArgs a = parse({"--bf16", "--bf16-storage-only", "--recompute-granularity", "full",
                                 "--recompute-method", "block", "--recompute-num-layers", "3"});
  EXPECT_EQ(a.precision.mode, PrecisionMode::BF16);
  EXPECT_FALSE(a.precision.bf16_products);
  EXPECT_EQ(a.recompute.granularity, RecomputeGranularity::Full);
  EXPECT_EQ(a.recompute.method, RecomputeMethod::Block);
  EXPECT_EQ(a.recompute.num_layers, 3);
  const PrecisionArgs s = parse({"--fp16", "--loss-scale", "512", "--min-loss-scale", "4"});
  EXPECT_FALSE(s.loss_scale.dynamic);
  EXPECT_EQ(s.loss_scale.static_scale, 512);
  const PrecisionArgs e = parse({"--bf16", "--fp8-format", "e4m3", "--fp8-margin", "2", "--fp8-amax-history-len",
                                 "16", "--fp8-amax-compute-algo", "max"});
  EXPECT_EQ(e.precision.mode, PrecisionMode::FP8);
  EXPECT_EQ(e.precision.fp8.format, Fp8Format::E4M3);
  EXPECT_EQ(e.precision.fp8.margin, 2);
  EXPECT_EQ(e.precision.fp8.amax_history_len, 16);
  EXPECT_EQ(e.precision.fp8.amax_algo, Fp8AmaxAlgo::Max);
}

// --bf16's product path: bf16 products where the CPU's bf16 matmul is clearly faster than its fp32 one
// (or on a device), fp32 products with bf16 storage where it is not or where there is none, with a note
// for the log; the flags force either.
TEST(PrecisionFlags, Bf16PathFollowsTheCpuUnlessAFlagForcesIt) {
  const CpuGemmRates zen4{200e9, 410e9}, xeon{285e9, 155e9}, avx2{140e9, 0}, even{200e9, 220e9};
  const Bf16Path fast = choose_bf16_path(false, false, Device::CPU, zen4);
  EXPECT_TRUE(fast.products);
  EXPECT_TRUE(fast.note.empty());
  const Bf16Path slower = choose_bf16_path(false, false, Device::CPU, xeon);
  EXPECT_FALSE(slower.products);
  EXPECT_NE(slower.note.find("155.0 GFLOP/s against 285.0 in fp32 (0.54x"), std::string::npos) << slower.note;
  EXPECT_NE(slower.note.find("--bf16-products"), std::string::npos) << slower.note;
  EXPECT_FALSE(choose_bf16_path(false, false, Device::CPU, even).products) << "1.1x is within the margin";
  const Bf16Path none = choose_bf16_path(false, false, Device::CPU, avx2);
  EXPECT_FALSE(none.products);
  EXPECT_NE(none.note.find("no bf16 matmul"), std::string::npos) << none.note;
  EXPECT_TRUE(choose_bf16_path(false, false, Device::CUDA, avx2).products) << "a device multiplies bf16 itself";
  for (const CpuGemmRates& cpu : {zen4, xeon, avx2}) {
    const Bf16Path storage = choose_bf16_path(true, false, Device::CPU, cpu);
    EXPECT_FALSE(storage.products);
    EXPECT_TRUE(storage.note.empty());
    const Bf16Path products = choose_bf16_path(false, true, Device::CPU, cpu);
    EXPECT_TRUE(products.products);
    EXPECT_TRUE(products.note.empty());
  }
  // Through the flags, on this CPU: --bf16 alone takes the path this process's measured rates say (they
  // are measured once, so asking again gives the ones the flags used); --bf16-products forces products.
  const PrecisionArgs plain = parse({"--bf16"});
  const CpuGemmRates here = measure_cpu_gemm_rates();
  EXPECT_GT(here.fp32, 0);
  EXPECT_EQ(here.bf16 > 0, cpu::has_bf16_matmul());
  EXPECT_EQ(plain.precision.bf16_products, here.bf16 >= kBf16ProductsMinSpeedup * here.fp32);
  EXPECT_EQ(plain.bf16_path_note.empty(), plain.precision.bf16_products);
  EXPECT_TRUE(parse({"--bf16", "--bf16-products"}).precision.bf16_products);
}

TEST(PrecisionFlags, ErrorsNameTheFlag) {
  EXPECT_NE(error_of({"--bf16-products"}).find("--bf16-products needs --bf16"), std::string::npos);
  EXPECT_NE(error_of({"--bf16", "--bf16-products", "--bf16-storage-only"}).find("cannot be given together"),
            std::string::npos);
  EXPECT_NE(error_of({"--bf16", "--fp16"}).find("--bf16 and --fp16"), std::string::npos);
  EXPECT_NE(error_of({"--bf16-storage-only"}).find("--bf16-storage-only"), std::string::npos);
  EXPECT_NE(error_of({"--fp8-format", "e5m2"}).find("--fp8-format"), std::string::npos);
  EXPECT_NE(error_of({"--fp8-format", "hybrid", "--fp8-amax-compute-algo", "avg"}).find("--fp8-amax-compute-algo"),
            std::string::npos);
  EXPECT_NE(error_of({"--fp16", "--hysteresis", "0"}).find("--hysteresis"), std::string::npos);
  EXPECT_NE(error_of({"--recompute-granularity", "some"}).find("--recompute-granularity"), std::string::npos);
  EXPECT_NE(error_of({"--recompute-num-layers", "0"}).find("--recompute-num-layers"), std::string::npos);
}

}  // namespace
}  // namespace megadlm
