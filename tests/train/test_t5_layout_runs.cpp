// pretrain_difflm --model-type t5 under mpirun against the single process (tests/layout_runs.h): dp2,
// with and without the distributed optimizer, tp2 and tp2 x dp2 give its losses (the first step within
// 1e-6 relative, every step of 20 within 1e-4), and the native checkpoints cross layouts: the single
// process resumed at iteration 10 from the dp2 distributed-optimizer run's checkpoint, and tp2 resumed
// from the single process's, continue its losses. Skipped without mpirun.
#include <gtest/gtest.h>

#include "family_runs.h"

using namespace megadlm;

TEST(T5LayoutRuns, LayoutsGiveTheSingleProcessLosses) {
  // Micro-batches of 4: dp2 and tp2 x dp2 take two of the global batch's four on each rank.
  test::check_layout_runs("t5", test::t5_flags,
                          {{"dp2", {2, {}}},
                           {"dp2_distopt", {2, {"--use-distributed-optimizer"}}},
                           {"tp2", {2, {"--tensor-model-parallel-size", "2"}}},
                           {"tp2_dp2", {4, {"--tensor-model-parallel-size", "2"}}}},
                          {{"dp2_distopt", {1, {}}}, {"single", {2, {"--tensor-model-parallel-size", "2"}}}});
}
