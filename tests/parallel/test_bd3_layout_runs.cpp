// pretrain_difflm --block-diffusion under tp 2, dp 2 and pp 2 (mpirun) trains the single process's
// model: the [x_t ; x_0] micro-batch (2 x --seq-length rows) and its BlockDiffusion mask pass through
// the tensor-parallel attention, the data-parallel split of the samples (the draws are keyed by the
// global sample index) and the pipeline's activations. Losses compared as scripts/layout_matrix.sh
// compares layouts: the first step within 1e-6 relative, all 20 within 1e-4. The test spawns mpirun
// itself and skips where it is not installed.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "layout_runs.h"
#include "test_util.h"

using namespace megadlm;

TEST(Bd3LayoutRuns, Tp2Dp2Pp2EqualTheSingleProcess) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const std::string mpirun = test::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  std::vector<std::string> flags = test::tiny_difflm_flags(data);
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == "--num-layers") flags[i + 1] = "2";  // two pipeline stages
    if (flags[i] == "--eval-iters") flags[i + 1] = "0";
  }
  flags = test::plus(flags, {"--block-diffusion", "--block-length", "4", "--bd3-clip-min", "0.3", "--bd3-clip-max",
                             "0.8", "--train-iters", "20"});
  const std::string ref_dir = dir / "single";
  test::train_on_ranks(mpirun, 1, test::plus(flags, {"--save", ref_dir}), ref_dir + ".log");
  if (HasFatalFailure()) return;
  const std::map<int64_t, double> ref = test::losses_of(ref_dir);
  ASSERT_EQ(ref.size(), 20u);
  const std::pair<std::string, std::vector<std::string>> layouts[] = {
      {"tp2", {"--tensor-model-parallel-size", "2"}},
      {"tp2_sp", {"--tensor-model-parallel-size", "2", "--sequence-parallel"}},
      {"dp2", {}},
      {"pp2", {"--pipeline-model-parallel-size", "2"}},
  };
  for (const auto& [name, extra] : layouts) {
    const std::string save = dir / name;
    test::train_on_ranks(mpirun, 2, test::plus(test::plus(flags, extra), {"--save", save}), save + ".log");
    if (HasFatalFailure()) return;
    test::expect_same_losses(ref, test::losses_of(save), 20, 1e-6, name);
  }
}
