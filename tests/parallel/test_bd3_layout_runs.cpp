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

#include "robustness/child_process.h"
#include "test_util.h"
#include "train_fixture.h"

using namespace megadlm;

namespace {

// pretrain_difflm with `flags` on `np` ranks (mpirun when np > 1); the output into `log`.
void train(const std::string& mpirun, int np, const std::vector<std::string>& flags, const std::string& log) {
  test::ChildOptions opt;
  opt.timeout_s = 300;
  test::ChildResult r;
  if (np == 1) {
    r = test::run_binary("pretrain_difflm", flags, log, opt);
  } else {
    const std::string asan_options = "ASAN_OPTIONS=" + test::asan_options_for_mpi();
    const std::vector<std::string> launch = {"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca",
                                             "btl", "self,vader", "-x", "OMP_NUM_THREADS=1", "-x", asan_options,
                                             "-np", std::to_string(np), test::binary_path("pretrain_difflm")};
    r = test::run_program(mpirun, test::plus(launch, flags), log, opt);
  }
  ASSERT_TRUE(r.exited && r.exit_code == 0) << np << " ranks: run failed:\n" << r.output;
}

std::map<int64_t, double> losses_of(const std::string& save_dir) {
  std::map<int64_t, double> out;
  for (const auto& j : test::training_lines(save_dir + "/metrics.jsonl"))
    out[j["iteration"].get<int64_t>()] = j["loss"].get<double>();
  return out;
}

}  // namespace

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
  train(mpirun, 1, test::plus(flags, {"--save", ref_dir}), ref_dir + ".log");
  if (HasFatalFailure()) return;
  const std::map<int64_t, double> ref = losses_of(ref_dir);
  ASSERT_EQ(ref.size(), 20u);
  const std::pair<std::string, std::vector<std::string>> layouts[] = {
      {"tp2", {"--tensor-model-parallel-size", "2"}},
      {"tp2_sp", {"--tensor-model-parallel-size", "2", "--sequence-parallel"}},
      {"dp2", {}},
      {"pp2", {"--pipeline-model-parallel-size", "2"}},
  };
  for (const auto& [name, extra] : layouts) {
    SCOPED_TRACE(name);
    const std::string save = dir / name;
    train(mpirun, 2, test::plus(test::plus(flags, extra), {"--save", save}), save + ".log");
    if (HasFatalFailure()) return;
    const std::map<int64_t, double> got = losses_of(save);
    ASSERT_EQ(got.size(), 20u);
    for (const auto& [it, loss] : got) {
      const double rel = std::fabs(loss - ref.at(it)) / std::fabs(ref.at(it));
      if (it == 1) {
        EXPECT_LE(rel, 1e-6) << "step 1: " << loss << " vs " << ref.at(it);
      }
      EXPECT_LE(rel, 1e-4) << "step " << it << ": " << loss << " vs " << ref.at(it);
    }
  }
}
