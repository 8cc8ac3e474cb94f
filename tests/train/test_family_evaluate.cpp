// evaluate on BERT and T5 checkpoints (infer/family_eval.h): on a tiny trained checkpoint, the
// reported losses and accuracies equal the trainer's validation numbers of the same step on the same
// samples (the valid split of --split, the checkpoint's seed and mask probability); the flags that do
// not apply to these families are refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bert_corpus.h"
#include "family_runs.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "train/bert_trainer.h"
#include "train/t5_trainer.h"
#include "train_fixture.h"

using namespace megadlm;
using test::plus;

namespace {

// The validation line of metrics.jsonl at `iteration`.
nlohmann::json validation_line(const std::string& metrics, int64_t iteration) {
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss") && j.value("iteration", int64_t{-1}) == iteration) return j;
  }
  ADD_FAILURE() << metrics << ": no validation line at iteration " << iteration;
  return nlohmann::json::object();
}

nlohmann::json evaluate_json(const std::vector<std::string>& args, const std::string& dir) {
  const std::string out = dir + "/eval.json";
  const auto r = test::run_binary("evaluate", plus(args, {"--output", out}), dir + "/eval_log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
  std::ifstream in(out);
  return nlohmann::json::parse(in, nullptr, false);
}

// evaluate's flags for the 16 validation samples the trainers' --eval-iters 2 micro-batches of 8 score.
std::vector<std::string> eval_flags(const std::string& run, const std::string& data) {
  return {"--load", run, "--data-path", data, "--split", "95,5,0", "--eval-samples", "16", "--micro-batch-size", "8"};
}

struct FamilyEvaluate : ::testing::Test {
  test::TempDir tmp;
  std::string vocab = test::write_bert_vocab(tmp.str());
  std::string data = test::write_ordered_corpus(tmp.str(), 300);
};

// A 3-step run of the family's trainer validating at step 3, its validation line and evaluate's
// report on its checkpoint.
template <class FamilyTrainer>
struct Scored {
  nlohmann::json val, res;
  Scored(const FamilyEvaluate& f, const std::vector<std::string>& flags) {
    {
      FamilyTrainer t(test::parse_flags(plus(plus({"pretrain_difflm"}, test::set_flag(flags, "--eval-interval", "3")),
                                             {"--train-iters", "3", "--save", f.tmp / "run"})));
      t.run();
    }
    val = validation_line(f.tmp / "run/metrics.jsonl", 3);
    res = evaluate_json(eval_flags(f.tmp / "run", f.data), f.tmp.str());
  }
};

}  // namespace

// Validation at iteration 3 (--eval-iters 2 micro-batches of 8) and the checkpoint of iteration 3:
// evaluate scores the same 16 samples with the same weights.
TEST_F(FamilyEvaluate, BertMatchesTheTrainersValidation) {
  MEGADLM_REQUIRE_BINARY("evaluate");
  const Scored<BertTrainer> run(*this, test::bert_flags(data, vocab));
  const nlohmann::json &val = run.val, &res = run.res, &d = res["dataset"];
  ASSERT_TRUE(res.contains("dataset")) << res.dump();
  EXPECT_EQ(res["model_type"], "bert");
  EXPECT_EQ(d["samples"], 16);
  EXPECT_EQ(d["seed"], 7);
  EXPECT_DOUBLE_EQ(d["mlm_loss"].get<double>(), val["val_loss"].get<double>());
  EXPECT_DOUBLE_EQ(d["perplexity"].get<double>(), std::exp(val["val_loss"].get<double>()));
  EXPECT_DOUBLE_EQ(d["mlm_accuracy"].get<double>(), val["val_mlm_accuracy"].get<double>());
  EXPECT_DOUBLE_EQ(d["sop_loss"].get<double>(), val["val_sop_loss"].get<double>());
  EXPECT_GT(d["masked_tokens"].get<int64_t>(), 0);
  const double sop_accuracy = d["sop_accuracy"].get<double>();
  EXPECT_TRUE(sop_accuracy >= 0 && sop_accuracy <= 1) << sop_accuracy;
  // Another seed draws other samples and masks: another loss.
  const nlohmann::json other = evaluate_json(plus(eval_flags(tmp / "run", data), {"--seed", "8"}), tmp.str());
  EXPECT_NE(other["dataset"]["mlm_loss"].get<double>(), d["mlm_loss"].get<double>());
  // What does not apply to a BERT checkpoint is refused by name.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--answer", "x"}, {"--mc-samples", "4"}, {"--seq-length", "16"}}) {
    const auto r = test::run_binary("evaluate", plus({"--load", tmp / "run", "--data-path", data}, extra),
                                    tmp / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(extra[0] + " is not available for a bert checkpoint"), std::string::npos) << r.output;
  }
  const auto r = test::run_binary("evaluate", {"--load", tmp / "run"}, tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--data-path: a bert checkpoint is evaluated on a sentence-split dataset"), std::string::npos)
      << r.output;
}

// The same for T5: the sequence-to-sequence loss of the validation samples.
TEST_F(FamilyEvaluate, T5MatchesTheTrainersValidation) {
  MEGADLM_REQUIRE_BINARY("evaluate");
  const Scored<T5Trainer> run(*this, test::t5_flags(data, vocab));
  const nlohmann::json &val = run.val, &res = run.res, &d = res["dataset"];
  ASSERT_TRUE(res.contains("dataset")) << res.dump();
  EXPECT_EQ(res["model_type"], "t5");
  EXPECT_EQ(d["samples"], 16);
  EXPECT_GT(d["labelled_tokens"].get<int64_t>(), 16);
  EXPECT_DOUBLE_EQ(d["loss"].get<double>(), val["val_loss"].get<double>());
  EXPECT_DOUBLE_EQ(d["perplexity"].get<double>(), std::exp(val["val_loss"].get<double>()));
  const nlohmann::json other = evaluate_json(plus(eval_flags(tmp / "run", data), {"--seed", "8"}), tmp.str());
  EXPECT_NE(other["dataset"]["loss"].get<double>(), d["loss"].get<double>());
}
