// pretrain_difflm --block-diffusion end to end on the tiny counting dataset (NullTokenizer ids): the loss
// falls, a resume is bitwise identical to an uninterrupted run, the checkpoint's model config records
// block diffusion, evaluation's NELBO runs over the BD3 layout, and bad flags are errors naming the flag.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/model_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "core/error.h"
#include "infer/likelihood.h"
#include "models/config_json.h"
#include "train/arguments.h"
#include "test_util.h"
#include "train_fixture.h"

using namespace megadlm;

namespace {

std::vector<std::string> bd3_flags(const std::string& data, const std::string& save) {
  return {"pretrain_difflm", "--model-type", "difflm", "--block-diffusion", "--block-length", "4", "--num-layers", "2",
          "--hidden-size", "32", "--num-heads", "4", "--seq-length", "16", "--batch-size", "4", "--global-batch-size",
          "8", "--data-path", data, "--tokenizer-type", "NullTokenizer", "--vocab-size", "64",
          "--make-vocab-size-divisible-by", "16", "--mask-token", "62", "--lr", "3e-3", "--lr-warmup-iters", "2",
          "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "2", "--seed", "7", "--save", save,
          "--data-cache-path", save + "_cache"};
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  for (const auto& j : test::training_lines(metrics)) out.push_back(j["loss"].get<double>());
  return out;
}

std::string parse_error(const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {"x", "--data-path", "d", "--seq-length", "16"};  // difflm: the default
  flags.insert(flags.end(), extra.begin(), extra.end());
  std::vector<const char*> argv;
  for (const auto& s : flags) argv.push_back(s.c_str());
  TrainArgs a;
  try {
    parse_train_args(static_cast<int>(argv.size()), argv.data(), a);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(BlockDiffusionTraining, FlagsSetTheModelAndTheSchedule) {
  const TrainArgs a = test::parse_flags(
      {"x", "--data-path", "d", "--seq-length", "16", "--block-diffusion", "--block-length", "4", "--bd3-clip-min",
       "0.3", "--bd3-clip-max", "0.8"});
  EXPECT_TRUE(a.model.block_diffusion);
  EXPECT_EQ(a.model.attention_mask, MaskType::BlockCausal);
  EXPECT_EQ(a.model.attention_block_size, 4);
  EXPECT_EQ(a.bd3_clip_min, 0.3);
  EXPECT_EQ(a.bd3_clip_max, 0.8);
  const TrainArgs d = test::parse_flags({"x", "--data-path", "d", "--seq-length", "16", "--block-diffusion",
                                         "--block-length", "4", "--dlm-eps", "0.01"});
  EXPECT_FLOAT_EQ(static_cast<float>(d.bd3_clip_min), 0.01f) << "the default lower end is --dlm-eps";
  EXPECT_EQ(d.bd3_clip_max, 1.0);
  const nlohmann::json j = config_to_json(a.model);
  EXPECT_TRUE(j.value("block_diffusion", false));
  const TransformerConfig back = config_from_json(j, "test");
  EXPECT_TRUE(back.block_diffusion);
  EXPECT_EQ(back.attention_block_size, 4);
  EXPECT_FALSE(config_to_json(test::parse_flags({"x", "--data-path", "d"}).model).contains("block_diffusion"));
}

TEST(BlockDiffusionTraining, BadFlagsNameTheFlag) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--block-diffusion"}, "--block-length"},
      {{"--block-diffusion", "--block-length", "5"}, "--seq-length 16 is not a multiple of --block-length 5"},
      {{"--block-diffusion", "--block-length", "4", "--model-type", "gpt"}, "--model-type difflm"},
      {{"--block-diffusion", "--block-length", "4", "--attention-mask-type", "no_mask"}, "--attention-mask-type"},
      {{"--block-diffusion", "--block-length", "4", "--model-running-mode", "vanilla"}, "--model-running-mode"},
      {{"--block-diffusion", "--block-length", "4", "--context-parallel-size", "2"}, "--context-parallel-size"},
      {{"--block-diffusion", "--block-length", "4", "--difflm-varilen-prob", "0.1"}, "--difflm-varilen-prob"},
      {{"--block-diffusion", "--block-length", "4", "--dlm-loss", "mdlm"}, "--dlm-loss"},
      {{"--block-diffusion", "--block-length", "4", "--reset-attention-mask"}, "--reset-attention-mask"},
      {{"--block-diffusion", "--block-length", "4", "--bd3-clip-min", "0.9", "--bd3-clip-max", "0.5"}, "--bd3-clip-min"},
      {{"--block-diffusion", "--block-length", "4", "--bd3-clip-max", "1.5"}, "--bd3-clip-max"},
      {{"--bd3-clip-min", "0.3"}, "--bd3-clip-min needs --block-diffusion"},
      {{"--block-diffusion", "--block-length", "4", "--sft"}, "--sft with --block-diffusion is not supported"},
  };
  for (const auto& [extra, want] : cases) {
    const std::string e = parse_error(extra);
    EXPECT_NE(e.find(want), std::string::npos) << "flags " << nlohmann::json(extra).dump() << ": got '" << e << "'";
  }
}

TEST(BlockDiffusionTraining, LossFallsAndTheCheckpointRecordsBlockDiffusion) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const std::string save = tmp / "run";
  // The clipped schedule and a larger step: the 1 / t weights of the unclipped one make 60 steps' losses
  // too noisy to compare. Validation draws the same noise at each evaluation, so its two values compare
  // closely; the training losses are averaged over 10 steps.
  std::vector<std::string> flags = bd3_flags(data, save);
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == "--lr") flags[i + 1] = "1e-2";
    if (flags[i] == "--eval-interval") flags[i + 1] = "60";
    if (flags[i] == "--eval-iters") flags[i + 1] = "8";
  }
  test::run_training(flags, {"--train-iters", "60", "--bd3-clip-min", "0.3", "--bd3-clip-max", "0.8"});
  const auto l = losses(save + "/metrics.jsonl");
  ASSERT_EQ(l.size(), 60u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += l[i] / 10;
  for (int i = 50; i < 60; ++i) last += l[i] / 10;
  EXPECT_LT(last, 0.9 * first) << "loss " << first << " -> " << last;
  std::vector<double> val;
  std::ifstream in(save + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) val.push_back(j["val_loss"].get<double>());
    if (j.contains("loss")) {
      ASSERT_TRUE(j.contains("mean_t") && j.contains("masked_fraction"));
    }
  }
  ASSERT_EQ(val.size(), 2u);
  EXPECT_LT(val[1], 0.95 * val[0]) << "validation " << val[0] << " -> " << val[1];

  // The checkpoint's model config says block diffusion; evaluation's NELBO (over [eps, 1]) is finite and
  // positive and its bound is what a perplexity of a 64-token vocabulary can be.
  LoadedModel lm = load_model(save, Device::CPU);
  ASSERT_TRUE(lm.model->config().block_diffusion);
  EXPECT_EQ(lm.model->config().attention_mask, MaskType::BlockCausal);
  EXPECT_EQ(lm.model->config().attention_block_size, 4);
  DiffusionLikelihoodOptions o;
  o.mask_token = lm.mask_token;
  o.mc_samples = 8;
  o.batch = 4;
  std::vector<int32_t> seq(16);
  for (int i = 0; i < 16; ++i) seq[static_cast<size_t>(i)] = 10 + i;
  const MCEstimate e = block_diffusion_nll(*lm.model, seq, o, 1e-3, 0);
  EXPECT_TRUE(std::isfinite(e.mean) && e.mean > 0) << e.mean;
  EXPECT_EQ(e.samples, 8);
  const MCEstimate again = block_diffusion_nll(*lm.model, seq, o, 1e-3, 0);
  EXPECT_EQ(e.mean, again.mean) << "the draws are keyed, not random";
  const std::vector<int32_t> odd(10, 3);
  EXPECT_NE(test::error_of([&] { block_diffusion_nll(*lm.model, odd, o, 1e-3, 0); }).find("multiple of the model's block length 4"),
            std::string::npos);
}

TEST(BlockDiffusionTraining, ResumeIsBitwiseIdentical) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const std::string full = tmp / "full", part = tmp / "part";
  test::run_training(bd3_flags(data, full), {"--train-iters", "8"});
  test::run_training(bd3_flags(data, part), {"--train-iters", "8", "--exit-interval", "4"});
  test::run_training(bd3_flags(data, part), {"--train-iters", "8", "--load", part});
  const auto a = losses(full + "/metrics.jsonl"), b = losses(part + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "iteration " << i + 1;
  EXPECT_EQ(file_checksum(resolve_checkpoint_dir(full) + "/model.safetensors"),
            file_checksum(resolve_checkpoint_dir(part) + "/model.safetensors"));
}
