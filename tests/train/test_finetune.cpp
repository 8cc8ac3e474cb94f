// --finetune and --no-load-rng. --finetune loads a checkpoint's weights only and starts a new run:
// iteration and data position at 0, a fresh optimizer, its checkpoints in its own --save with the
// loaded directory untouched. --no-load-rng is accepted for Megatron compatibility and changes
// nothing: every random draw is Philox keyed by the seed and the sample and step indices.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

using test::plus;

namespace {

std::vector<std::string> flags(const std::string& data) { return plus({"pretrain_difflm"}, test::tiny_difflm_flags(data)); }

std::map<std::string, uint64_t> checksums_under(const std::string& dir) {
  std::map<std::string, uint64_t> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = file_checksum(e.path().string());
  return out;
}

bool all_zero(const Tensor& t) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] != 0.0f) return false;
  return true;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  for (const auto& j : test::training_lines(metrics)) out.push_back(j["loss"].get<double>());
  return out;
}

}  // namespace

TEST(Finetune, LoadsWeightsOnlyAndStartsANewRunAtIterationZero) {
  test::TempDir tmp;
  const auto base = flags(test::make_counting_dataset(tmp.str(), 60));
  const std::string pre = tmp / "pretrained", tuned_dir = tmp / "finetuned";
  test::run_training(base, {"--train-iters", "4", "--save", pre});
  const auto pre_files = checksums_under(pre);

  // The same checkpoint loaded normally, to compare with.
  Trainer resumed(test::parse_flags(plus(base, {"--train-iters", "6", "--load", pre})));
  testing::internal::CaptureStderr();
  Trainer tuned(test::parse_flags(plus(base, {"--train-iters", "2", "--load", pre, "--finetune", "--save", tuned_dir})));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("loaded checkpoint " + pre + "/iter_0000004 (iteration 4, consumed samples 16; --finetune: "
                     "starting at iteration 0)"),
            std::string::npos)
      << log;
  // The weights are the checkpoint's; the optimizer state is not loaded.
  const ParamStore& a = tuned.model().params();
  const ParamStore& b = resumed.model().params();
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(std::memcmp(a.values(), b.values(), static_cast<size_t>(a.numel()) * sizeof(float)), 0);
  EXPECT_EQ(resumed.optimizer().steps_taken(), 4);
  EXPECT_FALSE(all_zero(resumed.optimizer().exp_avg()));
  EXPECT_EQ(tuned.optimizer().steps_taken(), 0);
  EXPECT_TRUE(all_zero(tuned.optimizer().exp_avg()));
  EXPECT_TRUE(all_zero(tuned.optimizer().exp_avg_sq()));

  // Iterations and data position count from 0.
  EXPECT_EQ(tuned.run(), 2);
  const auto lines = test::training_lines(tuned_dir + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["iteration"], 1);
  EXPECT_EQ(lines[0]["consumed_tokens"].get<double>(), 4.0 * 16.0);  // one global batch of 16-token sequences
  const std::string written = resolve_checkpoint_dir(tuned_dir);
  EXPECT_EQ(written, tuned_dir + "/iter_0000002");
  const CheckpointState st = read_checkpoint_state(written);
  EXPECT_EQ(st.iteration, 2);
  EXPECT_EQ(st.consumed_samples, 8u);
  // The loaded directory is untouched.
  EXPECT_EQ(checksums_under(pre), pre_files);
}

TEST(NoLoadRng, IsAcceptedAndChangesNothingOnAResume) {
  test::TempDir tmp;
  const auto base = flags(test::make_counting_dataset(tmp.str(), 60));
  EXPECT_TRUE(test::parse_flags(plus(base, {"--no-load-rng"})).no_load_rng);
  const std::string with = tmp / "with_rng", without = tmp / "no_load_rng";
  test::run_training(base, {"--train-iters", "4", "--exit-interval", "2", "--save", with});
  fs::copy(with, without, fs::copy_options::recursive);
  test::run_training(base, {"--train-iters", "4", "--load", with, "--save", with});
  test::run_training(base, {"--train-iters", "4", "--load", without, "--save", without, "--no-load-rng"});
  const auto a = losses(with + "/metrics.jsonl"), b = losses(without + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "iteration " << i + 1;  // bitwise
  EXPECT_EQ(file_checksum(with + "/iter_0000004/model.safetensors"),
            file_checksum(without + "/iter_0000004/model.safetensors"));
  EXPECT_EQ(file_checksum(with + "/iter_0000004/optimizer.safetensors"),
            file_checksum(without + "/iter_0000004/optimizer.safetensors"));
}
