// pretrain_difflm --model-type t5 under mpirun against the single process (tests/layout_runs.h): dp2,
// with and without the distributed optimizer, gives its losses (the first step within 1e-6 relative,
// every step of 20 within 1e-4), and the single process resumed at iteration 10 from the dp2
// distributed-optimizer run's checkpoint continues them. Skipped without mpirun.
#include <gtest/gtest.h>

#include "family_runs.h"

using namespace megadlm;

TEST(T5LayoutRuns, DataParallelGivesTheSingleProcessLosses) {
  // Micro-batches of 4: dp2 takes two of the global batch's four on each rank.
  test::check_layout_runs("t5", test::t5_flags,
                          {{"dp2", {2, {}}}, {"dp2_distopt", {2, {"--use-distributed-optimizer"}}}},
                          {{"dp2_distopt", {1, {}}}});
}
