// Supervised fine-tuning runs of pretrain_difflm (--sft) on a tiny conversation dataset (ByteTokenizer,
// train_fixture.h make_sft_dataset): gpt and difflm train with the loss falling in both layouts
// (padding, --sft-packing), resume bitwise, start from a pretrained checkpoint with --finetune, refuse
// bad --sft inputs with a clean exit 1, and give the single process's losses under tp 2, dp 2, pp 2
// and cp 2 (mpirun; the first step within 1e-6 relative, every step of 20 within 1e-4; skipped where
// mpirun is not installed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "data/indexed_dataset.h"
#include "data/loss_mask.h"
#include "robustness/child_process.h"
#include "layout_runs.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;
using test::plus;

namespace {

std::vector<double> losses(const std::string& save_dir) {
  std::vector<double> out;
  for (const auto& j : test::training_lines(save_dir + "/metrics.jsonl")) out.push_back(j["loss"].get<double>());
  return out;
}

// flags with the value of `name` replaced by `value`.
std::vector<std::string> set_flag(std::vector<std::string> flags, const std::string& name, const std::string& value) {
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == name) flags[i + 1] = value;
  return flags;
}

std::vector<std::string> in_process(const std::vector<std::string>& flags) { return plus({"pretrain_difflm"}, flags); }

void expect_loss_falls(const std::vector<std::string>& flags, const std::string& save, const std::string& what) {
  SCOPED_TRACE(what);
  test::run_training(in_process(flags), {"--train-iters", "40", "--save", save});
  const auto l = losses(save);
  ASSERT_EQ(l.size(), 40u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += l[i] / 5;
  for (int i = 35; i < 40; ++i) last += l[i] / 5;
  EXPECT_LT(last, 0.8 * first) << "loss " << first << " -> " << last;
}

}  // namespace

TEST(SftRuns, LossFallsForGptAndDiffLMInBothLayouts) {
  test::TempDir tmp;
  const std::string data = test::make_sft_dataset(tmp.str(), 200);
  for (const std::string type : {"gpt", "difflm"}) {
    expect_loss_falls(test::tiny_sft_flags(data, type), tmp / (type + "_padding"), type + " padding");
    expect_loss_falls(plus(test::tiny_sft_flags(data, type), {"--sft-packing"}), tmp / (type + "_packing"),
                      type + " packing");
  }
}

TEST(SftRuns, ResumeIsBitwiseIdentical) {
  for (const std::string type : {"gpt", "difflm"}) {
    SCOPED_TRACE(type);
    test::TempDir tmp(type);
    const std::string data = test::make_sft_dataset(tmp.str(), 60);
    const auto flags = in_process(plus(test::tiny_sft_flags(data, type), {"--train-iters", "8"}));
    test::expect_bitwise_resume(flags, tmp / "full", tmp / "part", 8);
  }
}

// Pretrained on the conversations' tokens (no --sft), then fine-tuned with --sft --finetune: weights
// only, a new run from iteration 0, and the pretrained start shows in a lower first loss than a start
// from scratch.
TEST(SftRuns, FinetuneFromAPretrainedCheckpoint) {
  test::TempDir tmp;
  const std::string data = test::make_sft_dataset(tmp.str(), 200);
  std::vector<std::string> pretrain = test::tiny_sft_flags(data, "gpt");
  pretrain.erase(pretrain.begin() + 2);  // "--sft"
  test::run_training(in_process(pretrain), {"--train-iters", "30", "--save", tmp / "pre"});
  const auto flags = in_process(plus(test::tiny_sft_flags(data, "gpt"), {"--train-iters", "3"}));
  test::run_training(flags, {"--save", tmp / "scratch"});
  test::run_training(flags, {"--save", tmp / "tuned", "--load", tmp / "pre", "--finetune"});
  const auto tuned = test::training_lines(tmp / "tuned/metrics.jsonl");
  ASSERT_EQ(tuned.size(), 3u);
  EXPECT_EQ(tuned[0]["iteration"].get<int64_t>(), 1);
  EXPECT_LT(tuned[0]["loss"].get<double>(), losses(tmp / "scratch")[0]);
}

// AR-to-diffusion adaptation: --finetune loads a gpt checkpoint into difflm (the same parameters,
// bidirectional attention); without --finetune the other model type is an error that says so.
TEST(SftRuns, FinetuneAdaptsAGptCheckpointIntoDifflm) {
  test::TempDir tmp;
  const std::string data = test::make_sft_dataset(tmp.str(), 200);
  std::vector<std::string> pretrain = test::tiny_sft_flags(data, "gpt");
  pretrain.erase(pretrain.begin() + 2);  // "--sft"
  test::run_training(in_process(pretrain), {"--train-iters", "20", "--save", tmp / "pre"});
  Trainer gpt(test::parse_flags(in_process(plus(pretrain, {"--train-iters", "21", "--load", tmp / "pre"}))));
  const auto dlm_flags = plus(test::tiny_sft_flags(data, "difflm"), {"--train-iters", "3"});
  Trainer dlm(test::parse_flags(in_process(plus(dlm_flags, {"--load", tmp / "pre", "--finetune", "--save", tmp / "dlm"}))));
  const ParamStore &a = gpt.model().params(), &b = dlm.model().params();
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_TRUE(std::equal(a.values(), a.values() + a.numel(), b.values()));
  dlm.run();
  const auto l = losses(tmp / "dlm");
  ASSERT_EQ(l.size(), 3u);
  for (double x : l) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;

  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const auto r = test::run_binary("pretrain_difflm", plus(dlm_flags, {"--load", tmp / "pre"}), tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("the checkpoint is a gpt model but --model-type is difflm (add --finetune"),
            std::string::npos)
      << r.output;
}

// --sft from a HuggingFace checkpoint (the Qwen3 fixture, vocabulary 96) on conversations of
// NullTokenizer ids (letters 1..26, '=' 30, eod 64): both model types train from the loaded weights.
TEST(SftRuns, StartsFromAHuggingFaceCheckpoint) {
  test::TempDir tmp;
  const std::string data = test::make_sft_dataset(tmp.str(), 40, 1, 30, 64);
  const std::string hf = std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/hf_qwen3";
  for (const std::string type : {"gpt", "difflm"}) {
    SCOPED_TRACE(type);
    std::vector<std::string> flags = {"pretrain_difflm", "--load-hf", hf, "--model-type", type, "--sft",
                                      "--seq-length", "24", "--micro-batch-size", "2", "--global-batch-size", "4",
                                      "--data-path", data, "--split", "100,0,0", "--tokenizer-type", "NullTokenizer",
                                      "--vocab-size", "64", "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0",
                                      "--seed", "5", "--data-cache-path", data + "_cache", "--train-iters", "3",
                                      "--save", tmp / type};
    if (type == "difflm") flags = plus(flags, {"--mask-token", "62"});
    test::run_training(flags, {});
    const auto l = losses(tmp / type);
    ASSERT_EQ(l.size(), 3u);
    for (double x : l) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
  }
}

// Bad --sft inputs: exit status 1 and a message naming the flag or file, never a signal.
TEST(SftRuns, BadSftInputsAreCleanErrors) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir tmp;
  const std::string data = test::make_sft_dataset(tmp.str(), 20);
  auto expect_error = [&](const std::vector<std::string>& flags, const std::vector<std::string>& words,
                          const std::string& name) {
    SCOPED_TRACE(name);
    const test::ChildResult r = test::run_binary("pretrain_difflm", plus(flags, {"--train-iters", "2"}), tmp / (name + ".log"));
    EXPECT_CLEAN_ERROR_EXIT(r);
    for (const std::string& w : words) EXPECT_NE(r.output.find(w), std::string::npos) << w << "\n" << r.output;
  };
  // Tokens without a loss mask.
  const std::string bare = tmp / "bare";
  {
    IndexedDatasetWriter w(bare, IndexDType::U16);
    w.add_document(std::vector<int32_t>{'a', '=', 'a', 256});
    w.finalize();
  }
  expect_error(set_flag(test::tiny_sft_flags(data, "gpt"), "--data-path", bare), {"--sft", bare + ".loss_mask.idx is missing"},
               "missing_mask");
  // A conversation longer than --seq-length + 1 (18 tokens at most in the data).
  expect_error(set_flag(test::tiny_sft_flags(data, "difflm"), "--seq-length", "12"), {data, "conversation ", "--seq-length 12"}, "over_long");
  expect_error(plus(test::tiny_sft_flags(data, "difflm"), {"--difflm-varilen-prob", "0.5"}),
               {"--sft", "--difflm-varilen-prob"}, "varilen");
  std::vector<std::string> no_sft = test::tiny_sft_flags(data, "gpt");
  no_sft.erase(no_sft.begin() + 2);
  expect_error(plus(no_sft, {"--sft-packing"}), {"--sft-packing needs --sft"}, "packing_without_sft");
}

// ---- layouts under mpirun --------------------------------------------------------------------------------

TEST(SftRuns, LayoutsGiveTheSingleProcessLosses) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const std::string mpirun = test::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  test::TempDir tmp;
  const std::string data = test::make_sft_dataset(tmp.str(), 100);
  const std::map<std::string, std::vector<std::string>> layouts = {
      {"tp2", {"--tensor-model-parallel-size", "2"}},
      {"dp2", {}},
      {"pp2", {"--pipeline-model-parallel-size", "2"}},
      {"cp2", {"--context-parallel-size", "2"}},
  };
  for (const std::string type : {"gpt", "difflm"}) {
    SCOPED_TRACE(type);
    const auto flags = plus(set_flag(test::tiny_sft_flags(data, type), "--num-layers", "2"), {"--train-iters", "20"});
    const std::string ref = tmp / (type + "_single");
    test::train_on_ranks(mpirun, 1, plus(flags, {"--save", ref}), ref + ".log");
    if (HasFatalFailure()) return;
    const auto want = test::losses_of(ref);
    ASSERT_EQ(want.size(), 20u);
    for (const auto& [name, extra] : layouts) {
      const std::string save = tmp / (type + "_" + name);
      test::train_on_ranks(mpirun, 2, plus(plus(flags, extra), {"--save", save}), save + ".log");
      if (HasFatalFailure()) return;
      test::expect_same_losses(want, test::losses_of(save), 20, 1e-6, name);
    }
  }
}
