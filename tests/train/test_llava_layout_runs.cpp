// pretrain_difflm --model-type llava under mpirun against the single process (tests/layout_runs.h), both
// backbones: dp2, and dp2 with the distributed optimizer, give its 20 losses (the first within 1e-6
// relative, every one within 1e-4): each rank feeds the images of its own micro-batches. A resume of the
// single process from the dp2 run's iteration-10 checkpoint continues its losses. Skipped without mpirun.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "layout_runs.h"
#include "llava_data.h"

using namespace megadlm;

TEST(LlavaLayoutRuns, DataParallelGivesTheSingleProcessLosses) {
  if (!std::filesystem::exists(test::binary_path("pretrain_difflm"))) GTEST_SKIP() << "pretrain_difflm not built";
  const std::string mpirun = test::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  test::TempDir tmp;
  const std::string data = test::make_llava_data(tmp, 24);
  for (const std::string lm : {"gpt", "difflm"}) {
    SCOPED_TRACE(lm);
    // Micro-batches of 2 in a global batch of 4: one micro-batch a rank under dp2.
    std::vector<std::string> flags = test::llava_flags(data, lm);
    flags.erase(flags.begin());  // the program's name: train_on_ranks gives it
    flags = test::plus(flags, {"--train-iters", "20", "--save-interval", "10"});
    const std::string ref = tmp / (lm + "_single");
    test::train_on_ranks(mpirun, 1, test::plus(flags, {"--save", ref}), ref + ".log");
    if (HasFatalFailure()) return;
    const auto want = test::losses_of(ref);
    ASSERT_EQ(want.size(), 20u);
    for (const auto& [name, extra] : {std::pair<std::string, std::vector<std::string>>{"dp2", {}},
                                      {"dp2_distopt", {"--use-distributed-optimizer"}}}) {
      const std::string save = tmp / (lm + "_" + name);
      test::train_on_ranks(mpirun, 2, test::plus(test::plus(flags, extra), {"--save", save}), save + ".log");
      if (HasFatalFailure()) return;
      test::expect_same_losses(want, test::losses_of(save), 20, 1e-6, lm + " " + name);
      test::report_losses(want, test::losses_of(save), "llava " + lm + " " + name);
    }
    const std::string resumed = tmp / (lm + "_resumed_from_dp2");
    test::train_on_ranks(mpirun, 1, test::plus(flags, {"--load", tmp / (lm + "_dp2/iter_0000010"), "--save", resumed}),
                         resumed + ".log");
    if (HasFatalFailure()) return;
    test::expect_same_losses(want, test::losses_of(resumed), 10, 1e-6, lm + " resumed from dp2");
    test::report_losses(want, test::losses_of(resumed), "llava " + lm + " resumed from dp2");
  }
}
