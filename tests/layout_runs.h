#pragma once
// Layout-equivalence runs of pretrain_difflm from a test: a run on np ranks (mpirun when np > 1), its
// losses, and the comparison scripts/layout_matrix.sh makes (the first step within a tolerance, every
// step within 1e-4 relative). Tests that use them skip where mpirun is not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "robustness/child_process.h"
#include "train_fixture.h"

namespace megadlm::test {

// pretrain_difflm with `flags` on `np` ranks, one OpenMP thread each under mpirun; the output into
// `log`. Returns how it ended.
inline ChildResult run_on_ranks(const std::string& mpirun, int np, const std::vector<std::string>& flags,
                                const std::string& log) {
  ChildOptions opt;
  opt.timeout_s = 300;
  if (np == 1) return run_binary("pretrain_difflm", flags, log, opt);
  const std::string asan_options = "ASAN_OPTIONS=" + asan_options_for_mpi();
  const std::vector<std::string> launch = {"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca",
                                           "btl", "self,vader", "-x", "OMP_NUM_THREADS=1", "-x", asan_options,
                                           "-np", std::to_string(np), binary_path("pretrain_difflm")};
  return run_program(mpirun, plus(launch, flags), log, opt);
}

// The same, failing the test when the run fails.
inline void train_on_ranks(const std::string& mpirun, int np, const std::vector<std::string>& flags,
                           const std::string& log) {
  const ChildResult r = run_on_ranks(mpirun, np, flags, log);
  ASSERT_TRUE(r.exited && r.exit_code == 0) << np << " ranks: run failed:\n" << r.output;
}

// iteration -> loss of a run's metrics.jsonl (written into its --save directory).
inline std::map<int64_t, double> losses_of(const std::string& save_dir) {
  std::map<int64_t, double> out;
  for (const auto& j : training_lines(save_dir + "/metrics.jsonl")) out[j["iteration"].get<int64_t>()] = j["loss"].get<double>();
  return out;
}

// got's losses against ref's at the same iterations: `steps` of them, the first within first_tol
// relative, every one within 1e-4.
inline void expect_same_losses(const std::map<int64_t, double>& ref, const std::map<int64_t, double>& got,
                               size_t steps, double first_tol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.size(), steps);
  bool first = true;
  for (const auto& [it, loss] : got) {
    ASSERT_TRUE(ref.count(it)) << "iteration " << it;
    const double rel = std::fabs(loss - ref.at(it)) / std::fabs(ref.at(it));
    if (first) {
      EXPECT_LE(rel, first_tol) << "iteration " << it << ": " << loss << " vs " << ref.at(it);
    }
    EXPECT_LE(rel, 1e-4) << "iteration " << it << ": " << loss << " vs " << ref.at(it);
    first = false;
  }
}

// Prints the first step's relative difference and the largest over the steps (for the docs).
inline void report_losses(const std::map<int64_t, double>& want, const std::map<int64_t, double>& got,
                          const std::string& name) {
  double first = -1, worst = 0;
  for (const auto& [it, loss] : got) {
    if (!want.count(it)) continue;
    const double rel = std::fabs(loss - want.at(it)) / std::fabs(want.at(it));
    if (first < 0) first = rel;
    worst = std::max(worst, rel);
  }
  std::printf("%-30s first step %.3e, max over %zu steps %.3e\n", name.c_str(), first, got.size(), worst);
}

}  // namespace megadlm::test
