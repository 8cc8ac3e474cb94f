// pretrain_difflm's trainer end to end with the precision flags: --fp16 skips overflowing steps and
// counts them while the dynamic loss scale comes down, and --bf16 / --fp8-format / recomputation
// train (the loss falls).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"
#include "train_fixture.h"

namespace megadlm {
namespace {

std::vector<std::string> flags(const std::string& data, const std::string& save) {
  return {"pretrain_difflm", "--model-type", "gpt", "--num-layers", "2", "--hidden-size", "32", "--num-heads", "4",
          "--seq-length", "32", "--batch-size", "4", "--global-batch-size", "8", "--data-path", data,
          "--tokenizer-type", "NullTokenizer", "--vocab-size", "64", "--make-vocab-size-divisible-by", "16", "--lr",
          "3e-3", "--lr-warmup-iters", "2", "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "2",
          "--train-iters", "14", "--seed", "7", "--save", save, "--data-cache-path", save + "_cache"};
}

TEST(TrainerPrecision, Fp16SkipsOverflowsAndBacksOff) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const std::string save = tmp.str() + "/fp16";
  // 2^30 overflows the fp16 gradients; with hysteresis 2 the scale halves from the second overflow on.
  test::run_training(flags(data, save), {"--fp16", "--initial-loss-scale", "1073741824"});
  const auto lines = test::training_lines(save + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 14u);
  const int64_t skipped = lines.back()["skipped_steps"].get<int64_t>();
  EXPECT_GE(skipped, 2);
  EXPECT_LT(skipped, 14);
  EXPECT_EQ(lines.back()["overflow_skips"].get<int64_t>(), skipped);
  // The first two overflows cost one halving (hysteresis), each later one another.
  EXPECT_EQ(lines.back()["loss_scale"].get<double>(), 1073741824.0 / static_cast<double>(1 << (skipped - 1)));
  EXPECT_EQ(lines[0]["loss_scale"].get<double>(), 1073741824.0) << "first overflow: absorbed by the hysteresis";
  EXPECT_LT(lines.back()["loss"].get<double>(), lines[skipped]["loss"].get<double>());
}

TEST(TrainerPrecision, Bf16Fp8AndRecomputeTrain) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const std::vector<std::vector<std::string>> variants = {
      {},
      {"--bf16", "--bf16-products"},  // bf16 products on every CPU (plain --bf16 takes the CPU's fast path)
      {"--bf16", "--bf16-storage-only", "--recompute-granularity", "full", "--recompute-num-layers", "2"},
      {"--fp8-format", "hybrid", "--fp8-amax-history-len", "4", "--fp8-amax-compute-algo", "max"}};
  double fp32_last = 0;
  int i = 0;
  for (const auto& v : variants) {
    const std::string what = v.empty() ? "fp32" : v[0] + (v.size() > 1 ? " " + v[1] : "");
    const std::string save = tmp.str() + "/run" + std::to_string(i++);
    test::run_training(flags(data, save), v);
    const auto lines = test::training_lines(save + "/metrics.jsonl");
    ASSERT_EQ(lines.size(), 14u) << what;
    EXPECT_EQ(lines.back()["skipped_steps"].get<int64_t>(), 0) << what;
    const double first = lines[0]["loss"].get<double>(), last = lines.back()["loss"].get<double>();
    EXPECT_LT(last, 0.9 * first) << what;
    if (v.empty()) fp32_last = last;
    else EXPECT_NEAR(last, fp32_last, 0.02 * fp32_last) << what << " ends near fp32";
  }
}

}  // namespace
}  // namespace megadlm
