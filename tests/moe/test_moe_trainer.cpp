// pretrain_difflm with --num-experts: both model types train end to end on a tiny synthetic dataset,
// the MoE metrics reach metrics.jsonl, a resume is bitwise identical, and bad MoE flags are errors
// naming the flag.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/arguments.h"
#include "train/trainer.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

namespace {

std::vector<std::string> flags(const std::string& model_type, const std::string& data, const std::string& save,
                               const std::string& layers = "2") {
  std::vector<std::string> f = {"pretrain_difflm", "--model-type", model_type, "--num-layers", layers, "--hidden-size", "32",
                                "--num-heads", "4", "--ffn-hidden-size", "48", "--seq-length", "32", "--batch-size", "4",
                                "--global-batch-size", "8", "--data-path", data, "--tokenizer-type", "NullTokenizer",
                                "--vocab-size", "64", "--make-vocab-size-divisible-by", "16", "--lr", "3e-3",
                                "--lr-warmup-iters", "2", "--log-interval", "1", "--eval-interval", "1000",
                                "--eval-iters", "2", "--seed", "7", "--save", save, "--data-cache-path", save + "_cache",
                                "--num-experts", "8", "--moe-grouped-gemm", "true", "--moe-router-topk", "2",
                                "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3"};
  if (model_type == "difflm") {
    f.push_back("--mask-token");
    f.push_back("62");
  }
  return f;
}

using test::parse_flags;
using test::run_training;
using test::training_lines;

void check_moe_training(const std::string& model_type) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 120);
  const std::string full = tmp / "full", part = tmp / "part";
  run_training(flags(model_type, data, full), {"--train-iters", "6"});
  const auto a = training_lines(full + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 6u);
  for (const auto& j : a) {
    ASSERT_TRUE(j.contains("moe_aux_loss") && j.contains("moe_z_loss") && j.contains("moe_layers"));
    EXPECT_GT(j["moe_aux_loss"].get<double>(), 0.0);
    EXPECT_GT(j["moe_z_loss"].get<double>(), 0.0);
    EXPECT_EQ(j["moe_dropped_fraction"].get<double>(), 0.0);  // no capacity limit
    ASSERT_EQ(j["moe_layers"].size(), 2u);
    for (const auto& l : j["moe_layers"]) {
      double total = 0;
      for (double t : l["tokens_per_expert"].get<std::vector<double>>()) total += t;
      EXPECT_EQ(total, 8.0 * 32 * 2) << "global batch x seq x top-2 per log interval of one step";
    }
  }
  // A resume reproduces the uninterrupted run bitwise (routing included).
  run_training(flags(model_type, data, part), {"--train-iters", "6", "--exit-interval", "3"});
  run_training(flags(model_type, data, part), {"--train-iters", "6", "--load", part});
  const auto b = training_lines(part + "/metrics.jsonl");
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "iteration " << i + 1;
    EXPECT_EQ(a[i]["moe_aux_loss"].get<double>(), b[i]["moe_aux_loss"].get<double>()) << "iteration " << i + 1;
  }
  // The next-token loss is smooth enough to fall within 6 steps (the diffusion loss, with its random
  // masking ratio per step, is not).
  if (model_type == "gpt") {
    EXPECT_LT(a.back()["loss"].get<double>(), a.front()["loss"].get<double>());
  }
}

std::string flag_error(std::vector<std::string> extra, const std::string& layers = "2") {
  std::vector<std::string> f = flags("gpt", "/nonexistent", "/tmp/unused", layers);
  f.insert(f.end(), extra.begin(), extra.end());
  std::vector<const char*> argv;
  for (const auto& s : f) argv.push_back(s.c_str());
  TrainArgs a;
  try {
    parse_train_args(static_cast<int>(argv.size()), argv.data(), a);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(MoETrainer, GPTTrainsAndResumesBitwise) { check_moe_training("gpt"); }
TEST(MoETrainer, DiffLMTrainsAndResumesBitwise) { check_moe_training("difflm"); }

TEST(MoETrainer, FlagErrorsNameTheFlag) {
  EXPECT_NE(flag_error({"--moe-router-topk", "9"}).find("--moe-router-topk"), std::string::npos);
  EXPECT_NE(flag_error({"--moe-router-type", "hash"}).find("--moe-router-type"), std::string::npos);
  EXPECT_NE(flag_error({"--moe-router-score-function", "tanh"}).find("--moe-router-score-function"), std::string::npos);
  EXPECT_NE(flag_error({"--moe-token-drop-policy", "random"}).find("--moe-token-drop-policy"), std::string::npos);
  EXPECT_NE(flag_error({"--moe-pad-expert-input-to-capacity"}).find("--moe-pad-expert-input-to-capacity"),
            std::string::npos);
  EXPECT_NE(flag_error({"--moe-layer-freq", "[1,0]"}, "3").find("--moe-layer-freq"), std::string::npos);
  EXPECT_NE(flag_error({"--moe-grouped-gemm", "maybe"}).find("--moe-grouped-gemm"), std::string::npos);
  EXPECT_NE(flag_error({"--expert-model-parallel-size", "2"}).find("--expert-model-parallel-size"), std::string::npos);
  EXPECT_NE(flag_error({"--moe-router-type", "expert_choice", "--moe-router-load-balancing-type", "aux_loss"})
                .find("expert_choice"),
            std::string::npos);
}

TEST(MoETrainer, LayerFreqPicksLayers) {
  TrainArgs a = parse_flags(flags("gpt", "/nonexistent", "/tmp/unused"));
  EXPECT_TRUE(a.model.moe.is_moe_layer(0) && a.model.moe.is_moe_layer(1));
  std::vector<std::string> f = flags("gpt", "/nonexistent", "/tmp/unused", "4");
  for (const char* s : {"--moe-layer-freq", "2"}) f.push_back(s);
  a = parse_flags(f);
  EXPECT_TRUE(a.model.moe.is_moe_layer(0) && !a.model.moe.is_moe_layer(1) && a.model.moe.is_moe_layer(2) &&
              !a.model.moe.is_moe_layer(3));
  f = flags("gpt", "/nonexistent", "/tmp/unused", "3");
  for (const char* s : {"--moe-layer-freq", "[0, 1, 1]"}) f.push_back(s);
  a = parse_flags(f);
  EXPECT_TRUE(!a.model.moe.is_moe_layer(0) && a.model.moe.is_moe_layer(1) && a.model.moe.is_moe_layer(2));
}
