// pretrain_difflm --model-type bert under mpirun against the single process (tests/layout_runs.h): tp2,
// tp2 with sequence parallelism, dp2 with the distributed optimizer and tp2 x dp2 give its losses (the
// first step within 1e-6 relative, every step of 20 within 1e-4), and the native checkpoints cross
// layouts: a resume of the single process from the dp2 and tp2 runs' checkpoints, and of tp2 x dp2
// (distributed optimizer) from the single process's, continue its losses. Skipped without mpirun.
#include <gtest/gtest.h>

#include "bert_corpus.h"
#include "family_runs.h"

using namespace megadlm;

TEST(BertLayoutRuns, LayoutsGiveTheSingleProcessLosses) {
  // Micro-batches of 4: tp2 x dp2 takes two of the global batch's four on each rank.
  test::check_layout_runs("bert", test::bert_flags,
                          {{"tp2", {2, {"--tensor-model-parallel-size", "2"}}},
                           {"tp2_sp", {2, {"--tensor-model-parallel-size", "2", "--sequence-parallel"}}},
                           {"dp2_distopt", {2, {"--use-distributed-optimizer"}}},
                           {"tp2_dp2", {4, {"--tensor-model-parallel-size", "2"}}}},
                          {{"dp2_distopt", {1, {}}},
                           {"tp2", {1, {}}},
                           {"single", {4, {"--tensor-model-parallel-size", "2", "--use-distributed-optimizer"}}}});
}
