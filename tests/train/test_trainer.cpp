// End-to-end tests of pretrain_difflm's trainer on a tiny synthetic dataset: resume is bitwise
// identical to an uninterrupted run, the loss goes down, and bad flags are errors naming the flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/native_checkpoint.h"
#include "core/error.h"
#include "train/arguments.h"
#include "train/trainer.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

namespace {

std::vector<std::string> base_flags(const std::string& model_type, const std::string& data, const std::string& save) {
  std::vector<std::string> f = {"pretrain_difflm", "--model-type", model_type, "--num-layers", "2", "--hidden-size", "32",
                                "--num-heads", "4", "--seq-length", "32", "--batch-size", "4", "--global-batch-size", "8",
                                "--data-path", data, "--tokenizer-type", "NullTokenizer", "--vocab-size", "64",
                                "--make-vocab-size-divisible-by", "16", "--lr", "3e-3", "--lr-warmup-iters", "2",
                                "--log-interval", "1", "--eval-interval", "1000", "--eval-iters", "2",
                                "--seed", "7", "--save", save, "--data-cache-path", save + "_cache"};
  if (model_type == "difflm") {
    f.push_back("--mask-token");
    f.push_back("62");
  }
  return f;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  for (const auto& j : test::training_lines(metrics)) out.push_back(j["loss"].get<double>());
  return out;
}

void expect_resume_identical(const std::string& model_type) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const std::string full = tmp / "full", part = tmp / "part";
  test::run_training(base_flags(model_type, data, full), {"--train-iters", "8"});
  test::run_training(base_flags(model_type, data, part), {"--train-iters", "8", "--exit-interval", "4"});
  test::run_training(base_flags(model_type, data, part), {"--train-iters", "8", "--load", part});
  const auto a = losses(full + "/metrics.jsonl"), b = losses(part + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "iteration " << i + 1;  // bitwise
  // And the final weights.
  const std::string fa = resolve_checkpoint_dir(full) + "/model.safetensors";
  const std::string fb = resolve_checkpoint_dir(part) + "/model.safetensors";
  EXPECT_EQ(file_checksum(fa), file_checksum(fb));
}

}  // namespace

TEST(Trainer, ResumeIsBitwiseIdenticalGPT) { expect_resume_identical("gpt"); }
TEST(Trainer, ResumeIsBitwiseIdenticalDiffLM) { expect_resume_identical("difflm"); }

// A resume with nothing left to train (the checkpoint at --train-iters) takes no step and, as Megatron's
// pretrain does, saves its state: into another --save directory the checkpoint's own files, bit for
// bit; into the directory it resumed from nothing (the checkpoint is already there).
TEST(Trainer, AResumeWithNoStepLeftSavesItsStateElsewhereOnly) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  const std::string a = tmp / "a", b = tmp / "b";
  test::run_training(base_flags("difflm", data, a), {"--train-iters", "3"});
  const std::string ckpt = resolve_checkpoint_dir(a);
  const auto written = fs::last_write_time(ckpt + "/model.safetensors");
  test::run_training(base_flags("difflm", data, b), {"--train-iters", "3", "--load", a});
  ASSERT_EQ(resolve_checkpoint_dir(b), b + "/iter_0000003");
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(file_checksum(ckpt + "/" + file), file_checksum(b + "/iter_0000003/" + file)) << file;
  EXPECT_TRUE(test::training_lines(b + "/metrics.jsonl").empty()) << "no step was taken";
  test::run_training(base_flags("difflm", data, a), {"--train-iters", "3", "--load", a});
  EXPECT_EQ(fs::last_write_time(ckpt + "/model.safetensors"), written) << "the checkpoint was rewritten";
}

TEST(Trainer, LossGoesDownOnALearnablePattern) {
  for (const char* type : {"gpt", "difflm"}) {
    test::TempDir tmp;
    const std::string data = test::make_counting_dataset(tmp.str(), 200);
    const std::string save = tmp / "run";
    test::run_training(base_flags(type, data, save), {"--train-iters", "40"});
    const auto l = losses(save + "/metrics.jsonl");
    ASSERT_EQ(l.size(), 40u);
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += l[i] / 5;
    for (int i = 35; i < 40; ++i) last += l[i] / 5;
    // The diffusion loss is noisier (t varies per sequence) and its task harder: a weaker bar.
    const double bar = std::string(type) == "gpt" ? 0.7 : 0.85;
    EXPECT_LT(last, bar * first) << type << ": loss " << first << " -> " << last;
  }
}

TEST(Trainer, FlagErrorsNameTheFlag) {
  auto error_of = [](std::vector<std::string> flags) -> std::string {
    std::vector<const char*> argv;
    for (const auto& s : flags) argv.push_back(s.c_str());
    TrainArgs a;
    try {
      parse_train_args(static_cast<int>(argv.size()), argv.data(), a);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::vector<std::string> ok = {"x", "--data-path", "d"};
  auto with = [&](std::vector<std::string> extra) {
    auto f = ok;
    f.insert(f.end(), extra.begin(), extra.end());
    return f;
  };
  EXPECT_NE(error_of(with({"--no-such-flag", "1"})).find("--no-such-flag"), std::string::npos);
  EXPECT_NE(error_of(with({"--hidden-size", "100", "--num-heads", "7"})).find("--num-attention-heads"), std::string::npos);
  EXPECT_NE(error_of(with({"--model-type", "vlm"})).find("--model-type: unknown value 'vlm'"), std::string::npos);
  EXPECT_NE(error_of(with({"--model-type", "llava"})).find("--model-type llava trains on --sft data"), std::string::npos);
  EXPECT_NE(error_of(with({"--model-type", "t5", "--fp16"})).find("--fp16 is not available with --model-type t5"),
            std::string::npos);
  EXPECT_NE(error_of(with({"--model-type", "bert", "--fp16"})).find("--fp16 is not available with --model-type bert"),
            std::string::npos);
  EXPECT_NE(error_of(with({"--global-batch-size", "10", "--batch-size", "4"})).find("--global-batch-size"),
            std::string::npos);
  EXPECT_NE(error_of(with({"--group-query-attention", "--num-query-groups", "5"})).find("--num-query-groups"),
            std::string::npos);
  EXPECT_NE(error_of({"x"}).find("--data-path"), std::string::npos);
}

TEST(Trainer, RefusesAModelThatCannotFitWithTheEstimate) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 200);
  auto flags = base_flags("difflm", data, tmp / "big");
  // The guide's 32-layer 4096-hidden model at batch 8 x 2048 needs far more than this machine has.
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"--num-layers", "32"}, {"--hidden-size", "4096"}, {"--num-heads", "32"}, {"--seq-length", "2048"},
           {"--batch-size", "8"}, {"--global-batch-size", "8"}}) {
    for (size_t i = 0; i + 1 < flags.size(); ++i)
      if (flags[i] == k) flags[i + 1] = v;
  }
  try {
    Trainer t(test::parse_flags(flags));
    FAIL() << "expected the model to be refused";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("does not fit in memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  }
}
