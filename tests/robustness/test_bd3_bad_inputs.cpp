// pretrain_difflm --block-diffusion with flags it cannot honour, and evaluate on a block diffusion
// checkpoint with a mode it does not offer: exit status 1 with an error naming the flag, never a signal.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "robustness/child_process.h"
#include "test_util.h"
#include "train_fixture.h"

using namespace megadlm;

TEST(Bd3BadInputs, PretrainRefusesFlagsBlockDiffusionCannotHonour) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 20);
  const std::vector<std::string> base = test::plus(test::tiny_difflm_flags(data), {"--train-iters", "1"});
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--block-diffusion"}, "--block-diffusion needs --block-length > 0"},
      {{"--block-diffusion", "--block-length", "5"}, "--seq-length 16 is not a multiple of --block-length 5"},
      {{"--block-diffusion", "--block-length", "4", "--model-running-mode", "vanilla"}, "--model-running-mode vanilla"},
      {{"--block-diffusion", "--block-length", "4", "--context-parallel-size", "2"}, "--context-parallel-size 2"},
      {{"--block-diffusion", "--block-length", "4", "--difflm-varilen-prob", "0.5"}, "--difflm-varilen-prob"},
      {{"--block-diffusion", "--block-length", "4", "--bd3-clip-min", "0.8", "--bd3-clip-max", "0.3"},
       "--bd3-clip-min 0.8 must be in [0, --bd3-clip-max 0.3)"},
      {{"--bd3-clip-max", "0.5"}, "--bd3-clip-max needs --block-diffusion"},
  };
  for (const auto& [extra, want] : cases) {
    const auto r = test::run_binary("pretrain_difflm", test::plus(base, extra), dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find("pretrain_difflm: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  }
}

TEST(Bd3BadInputs, EvaluateRefusesModesItDoesNotOfferForBlockDiffusion) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  MEGADLM_REQUIRE_BINARY("evaluate");
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 20);
  const std::string save = dir / "run";
  const auto t = test::run_binary(
      "pretrain_difflm",
      test::plus(test::tiny_difflm_flags(data), {"--block-diffusion", "--block-length", "4", "--train-iters", "1",
                                                 "--save", save}),
      dir / "train.txt");
  ASSERT_TRUE(t.exited && t.exit_code == 0) << t.output;
  auto r = test::run_binary("evaluate", {"--load", save, "--prompt", "a", "--answer", "b"}, dir / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--answer and --choices-file are not available for a block diffusion checkpoint"),
            std::string::npos)
      << r.output;
  r = test::run_binary("evaluate", {"--load", save, "--data-path", data, "--seq-length", "10"}, dir / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--seq-length 10 is not a multiple of the checkpoint's block length 4"), std::string::npos)
      << r.output;
  // And the NELBO over the BD3 layout runs.
  r = test::run_binary("evaluate",
                       {"--load", save, "--data-path", data, "--eval-samples", "2", "--mc-samples", "2"},
                       dir / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_NE(r.output.find("\"perplexity_name\": \"ppl (ELBO bound)\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"block_length\": 4"), std::string::npos) << r.output;
}
