// pretrain_difflm --model-type bert under mpirun against the single process (tests/layout_runs.h): tp2,
// tp2 with sequence parallelism, dp2 with the distributed optimizer and tp2 x dp2 give its losses (the
// first step within 1e-6 relative, every step of 20 within 1e-4), and the native checkpoints cross
// layouts: a resume of the single process from the dp2 and tp2 runs' checkpoints, and of tp2 x dp2
// (distributed optimizer) from the single process's, continue its losses. Skipped without mpirun.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bert_corpus.h"
#include "layout_runs.h"
#include "test_util.h"

using namespace megadlm;
using test::plus;

namespace {

// Prints the first step's relative difference and the largest over the steps (for docs/bert.md).
void report(const std::map<int64_t, double>& want, const std::map<int64_t, double>& got, const std::string& name) {
  double first = -1, worst = 0;
  for (const auto& [it, loss] : got) {
    if (!want.count(it)) continue;
    const double rel = std::fabs(loss - want.at(it)) / std::fabs(want.at(it));
    if (first < 0) first = rel;
    worst = std::max(worst, rel);
  }
  std::printf("bert %-24s first step %.3e, max over %zu steps %.3e\n", name.c_str(), first, got.size(), worst);
}

}  // namespace

TEST(BertLayoutRuns, LayoutsGiveTheSingleProcessLosses) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const std::string mpirun = test::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  test::TempDir tmp;
  const std::string vocab = test::write_bert_vocab(tmp.str()), data = test::write_ordered_corpus(tmp.str(), 150);
  // Micro-batches of 4: tp2 x dp2 takes two of the global batch's four on each rank.
  const auto flags = plus(test::set_flag(test::bert_flags(data, vocab), "--micro-batch-size", "4"),
                          {"--train-iters", "20", "--save-interval", "10"});
  const std::string ref = tmp / "single";
  test::train_on_ranks(mpirun, 1, plus(flags, {"--save", ref}), ref + ".log");
  if (HasFatalFailure()) return;
  const auto want = test::losses_of(ref);
  ASSERT_EQ(want.size(), 20u);
  struct Layout {
    int np;
    std::vector<std::string> flags;
  };
  const std::map<std::string, Layout> layouts = {
      {"tp2", {2, {"--tensor-model-parallel-size", "2"}}},
      {"tp2_sp", {2, {"--tensor-model-parallel-size", "2", "--sequence-parallel"}}},
      {"dp2_distopt", {2, {"--use-distributed-optimizer"}}},
      {"tp2_dp2", {4, {"--tensor-model-parallel-size", "2"}}},
  };
  for (const auto& [name, layout] : layouts) {
    const std::string save = tmp / name;
    test::train_on_ranks(mpirun, layout.np, plus(plus(flags, layout.flags), {"--save", save}), save + ".log");
    if (HasFatalFailure()) return;
    test::expect_same_losses(want, test::losses_of(save), 20, 1e-6, name);
    report(want, test::losses_of(save), name);
  }
  // Resumes at iteration 10 in another layout: iterations 11 to 20 are the single process's.
  const std::vector<std::pair<std::string, Layout>> resumes = {
      {"dp2_distopt", {1, {}}},
      {"tp2", {1, {}}},
      {"single", {4, {"--tensor-model-parallel-size", "2", "--use-distributed-optimizer"}}},
  };
  for (const auto& [from, layout] : resumes) {
    const std::string save = tmp / ("resumed_from_" + from);
    test::train_on_ranks(mpirun, layout.np,
                         plus(plus(flags, layout.flags), {"--load", tmp / (from + "/iter_0000010"), "--save", save}),
                         save + ".log");
    if (HasFatalFailure()) return;
    test::expect_same_losses(want, test::losses_of(save), 10, 1e-6, "resumed from " + from);
    report(want, test::losses_of(save), "resumed from " + from);
  }
}
