// pretrain_difflm --model-type bert under mpirun against the single process (tests/layout_runs.h): tp2,
// tp2 with sequence parallelism, dp2 with the distributed optimizer and tp2 x dp2 give its losses (the
// first step within 1e-6 relative, every step of 20 within 1e-4), and the native checkpoints cross
// layouts: a resume of the single process from the dp2 and tp2 runs' checkpoints, and of tp2 x dp2
// (distributed optimizer) from the single process's, continue its losses. The pipeline split (pp2,
// pp2 x dp2, pp2 x tp2 with sequence parallelism) likewise, with resumes across it both ways, and its
// validation; and the layer count it cannot split is refused by name. Skipped without mpirun.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// Two stages of one layer each: the embedding on the first, the final norm, the MLM head (with its own
// copy of the tied word embeddings) and the binary head on the second; four micro-batches a step go
// through 1F1B (two a step on each data-parallel rank under pp2 x dp2).
TEST(BertLayoutRuns, PipelineStagesGiveTheSingleProcessLosses) {
  test::check_layout_runs("bert", test::bert_flags,
                          {{"pp2", {2, {"--pipeline-model-parallel-size", "2"}}},
                           {"pp2_dp2", {4, {"--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"}}}},
                          {{"pp2", {1, {}}}, {"single", {2, {"--pipeline-model-parallel-size", "2"}}}});
}

// The same two stages under bf16 with full recomputation, against the single process under the same
// flags: each stage keeps its own bf16 copies of its weights and recomputes its own layers.
TEST(BertLayoutRuns, PipelineStagesUnderBf16WithRecomputationGiveTheSingleProcessLosses) {
  const auto bf16_flags = [](const std::string& data, const std::string& vocab) {
    return test::plus(test::bert_flags(data, vocab), {"--bf16", "--recompute-granularity", "full"});
  };
  test::check_layout_runs("bert bf16 recompute", bf16_flags, {{"pp2", {2, {"--pipeline-model-parallel-size", "2"}}}},
                          {});
}

// Each stage's layers and heads split over two tensor-parallel ranks with sequence parallelism: the
// activations between the stages are each rank's N/tp rows.
TEST(BertLayoutRuns, PipelineWithTensorParallelismGivesTheSingleProcessLosses) {
  test::check_layout_runs(
      "bert", test::bert_flags,
      {{"pp2_tp2_sp", {4, {"--pipeline-model-parallel-size", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"}}}},
      {});
}

TEST(BertLayoutRuns, LayersThatTheStagesCannotShareAreRefused) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const std::string mpirun = test::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  test::TempDir tmp;
  const std::string vocab = test::write_bert_vocab(tmp.str()), data = test::write_ordered_corpus(tmp.str(), 20);
  const auto flags = test::plus(test::set_flag(test::bert_flags(data, vocab), "--num-layers", "3"),
                                {"--train-iters", "1", "--pipeline-model-parallel-size", "2"});
  const test::ChildResult r = test::run_on_ranks(mpirun, 2, flags, tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code != 0) << r.output;
  EXPECT_NE(r.output.find("--num-layers 3 is not divisible by --pipeline-model-parallel-size 2"), std::string::npos)
      << r.output;
}

// The validation of a pp2 run (the forward through both stages, scored on the last, its sums broadcast)
// reports the single process's numbers: bitwise at iteration 0, on the same weights; within 1e-6 after
// two steps (the gradient norm's sum over the stages is in another order). The logged gradient norms
// agree within 1e-6 (the last stage's copy of the tied word embeddings counted once).
TEST(BertLayoutRuns, PipelineValidationIsTheSingleProcesss) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const std::string mpirun = test::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  test::TempDir tmp;
  const std::string vocab = test::write_bert_vocab(tmp.str()), data = test::write_ordered_corpus(tmp.str(), 150);
  const auto flags = test::plus(test::set_flag(test::bert_flags(data, vocab), "--eval-interval", "2"),
                                {"--train-iters", "2"});
  auto validations = [](const std::string& save) {
    std::vector<nlohmann::json> out;
    std::ifstream in(save + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("val_loss")) out.push_back(j);
    }
    return out;
  };
  test::train_on_ranks(mpirun, 1, test::plus(flags, {"--save", tmp / "single"}), tmp / "single.log");
  test::train_on_ranks(mpirun, 2, test::plus(flags, {"--pipeline-model-parallel-size", "2", "--save", tmp / "pp2"}),
                       tmp / "pp2.log");
  if (::testing::Test::HasFatalFailure()) return;
  const auto want = validations(tmp / "single"), got = validations(tmp / "pp2");
  ASSERT_EQ(want.size(), 2u);  // iterations 0 and 2
  ASSERT_EQ(got.size(), 2u);
  for (const char* key : {"val_loss", "val_mlm_accuracy", "val_sop_loss"}) {
    EXPECT_EQ(got[0].at(key).get<double>(), want[0].at(key).get<double>()) << key;
    EXPECT_NEAR(got[1].at(key).get<double>(), want[1].at(key).get<double>(), 1e-6 * want[1].at(key).get<double>())
        << key;
  }
  EXPECT_GT(want[0].at("val_mlm_accuracy").get<double>() + want[1].at("val_mlm_accuracy").get<double>(), 0.0);
  const auto norms = test::field(tmp / "single", "grad_norm"), pp_norms = test::field(tmp / "pp2", "grad_norm");
  ASSERT_EQ(norms.size(), 2u);
  ASSERT_EQ(pp_norms.size(), 2u);
  for (size_t i = 0; i < norms.size(); ++i) EXPECT_NEAR(pp_norms[i], norms[i], 1e-6 * norms[i]) << "step " << i + 1;
}
