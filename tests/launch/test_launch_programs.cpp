// pretrain_difflm under a Slurm step's environment, set here as srun sets it for its tasks: a step of
// one task trains as one rank and logs where it runs; a step of two tasks whose MPI did not start
// through Slurm (srun without --mpi: MPI's world is the process alone) is refused with an error naming
// Slurm's variables and MPI's world, instead of every task training alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "robustness/child_process.h"
#include "test_util.h"
#include "train_fixture.h"

namespace megadlm {
namespace {

// Sets environment variables for the lifetime of the guard (a child started meanwhile inherits them).
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::make_pair(true, std::string(old)) : std::make_pair(false, std::string());
      setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v.first) setenv(k.c_str(), v.second.c_str(), 1);
      else unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::pair<bool, std::string>> saved_;
};

std::map<std::string, std::string> srun_task(int rank, int world) {
  return {{"SLURM_JOB_ID", "4242"},       {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(rank)}, {"SLURM_NTASKS", std::to_string(world)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(world)}, {"SLURM_LOCALID", std::to_string(rank)},
          {"SLURM_NODEID", "0"},          {"SLURM_STEP_TASKS_PER_NODE", std::to_string(world)}};
}

bool under_a_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

TEST(SlurmLaunch, SingleTaskTrainsAsOneRankAndLogsItsPlace) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  if (under_a_launcher()) GTEST_SKIP() << "runs its own launcher environment; this process is already under one";
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  ScopedEnv env(srun_task(0, 1));
  const test::ChildResult r = test::run_binary(
      "pretrain_difflm", test::plus(test::tiny_difflm_flags(data), {"--train-iters", "1"}), dir.str() + "/log");
  ASSERT_TRUE(r.exited) << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("launch: slurm: rank 0 of 1, local rank 0 of 1 on node 0; no MPI (one process)"),
            std::string::npos)
      << r.output;
}

TEST(SlurmLaunch, TwoTasksWithoutPmiAreRefusedNamingSlurmAndMpi) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  if (under_a_launcher()) GTEST_SKIP() << "runs its own launcher environment; this process is already under one";
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  // This task starts MPI (a singleton).
  std::map<std::string, std::string> vars = srun_task(0, 2);
  vars["ASAN_OPTIONS"] = test::asan_options_for_mpi();
  ScopedEnv env(vars);
  test::ChildOptions opt;
  opt.timeout_s = 120;
  const test::ChildResult r = test::run_binary(
      "pretrain_difflm", test::plus(test::tiny_difflm_flags(data), {"--train-iters", "1"}), dir.str() + "/log", opt);
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("pretrain_difflm: error: Slurm started 2 tasks (SLURM_STEP_NUM_TASKS=2, this is "
                          "SLURM_PROCID=0) but MPI's world has 1 rank"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("srun --mpi=pmix"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("iteration"), std::string::npos) << "trained alone:\n" << r.output;
}

TEST(SlurmLaunch, GarbageSlurmVariableIsAnErrorNamingIt) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  if (under_a_launcher()) GTEST_SKIP() << "runs its own launcher environment; this process is already under one";
  test::TempDir dir;
  auto vars = srun_task(0, 2);
  vars["SLURM_PROCID"] = "zero";
  ScopedEnv env(vars);
  const test::ChildResult r = test::run_binary("pretrain_difflm", {"--help"}, dir.str() + "/log");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("pretrain_difflm: error: environment variable SLURM_PROCID='zero' is not a whole number"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace megadlm
