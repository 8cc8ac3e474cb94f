// pretrain_difflm --model-type bert (train/bert_trainer.h): a tiny BERT (hidden 32, 2 layers) on a
// small synthetic sentence-split corpus with a tiny WordPiece vocabulary. The MLM and sentence-order
// losses fall, a resume from a mid-run checkpoint is bitwise the uninterrupted run, the checkpoint
// records model_type bert with the optimizer state, evaluation reports the masked-token accuracy, bf16
// follows fp32 and resumes bitwise, recomputation changes no bit, and every flag the slice does not
// build is an exit 1 naming it. The parallel layouts: test_bert_layout_runs.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bert_corpus.h"
#include "family_runs.h"
#include "checkpoint/native_checkpoint.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "train/bert_trainer.h"
#include "train_fixture.h"

using namespace megadlm;
using test::bert_flags;
using test::field;
using test::mean;
using test::plus;
using test::set_flag;
using test::write_ordered_corpus;

namespace {

void run_bert(const std::vector<std::string>& flags, const std::vector<std::string>& extra) {
  BertTrainer t(test::parse_flags(plus(plus({"pretrain_difflm"}, flags), extra)));
  t.run();
}

struct BertRun : ::testing::Test {
  test::TempDir tmp;
  std::string vocab = test::write_bert_vocab(tmp.str());
  std::string data = write_ordered_corpus(tmp.str(), 300);
};

}  // namespace

// The sentence-order head leaves chance (ln 2) only after some 80 steps of this model: 100 steps.
TEST_F(BertRun, MlmAndSentenceOrderLossesFall) {
  run_bert(bert_flags(data, vocab), {"--train-iters", "100", "--save", tmp / "run"});
  const auto mlm = field(tmp / "run", "mlm_loss"), sop = field(tmp / "run", "sop_loss"), loss = field(tmp / "run", "loss");
  ASSERT_EQ(mlm.size(), 100u);
  EXPECT_LT(mean(mlm, 90, 100), 0.8 * mean(mlm, 0, 10)) << mean(mlm, 0, 10) << " -> " << mean(mlm, 90, 100);
  EXPECT_LT(mean(sop, 90, 100), mean(sop, 0, 10) - 0.03) << mean(sop, 0, 10) << " -> " << mean(sop, 90, 100);
  EXPECT_DOUBLE_EQ(loss[99], mlm[99] + sop[99]);
}

TEST_F(BertRun, WithoutTheBinaryHeadOnlyTheMlmLoss) {
  run_bert(bert_flags(data, vocab), {"--train-iters", "40", "--save", tmp / "run", "--bert-no-binary-head"});
  const auto lines = test::training_lines(tmp / "run/metrics.jsonl");
  ASSERT_EQ(lines.size(), 40u);
  EXPECT_FALSE(lines[0].contains("sop_loss"));
  const auto mlm = field(tmp / "run", "mlm_loss");
  EXPECT_LT(mean(mlm, 35, 40), 0.8 * mean(mlm, 0, 5));
}

TEST_F(BertRun, ResumeIsBitwiseIdentical) {
  test::expect_bitwise_resume(run_bert, bert_flags(data, vocab), tmp.str(), 8, 4);
}

// bf16 (bf16 products): the loss follows fp32's and falls; a resume under bf16 with full recomputation
// is bitwise the uninterrupted run; recomputation changes no bit of the losses or the weights.
TEST_F(BertRun, Bf16FollowsFp32AndFalls) {
  test::expect_bf16_follows_fp32(run_bert, bert_flags(data, vocab), tmp.str(), 20, 1e-2, 5e-2, 0.95);
}

TEST_F(BertRun, Bf16ResumeWithRecomputationIsBitwiseIdentical) {
  test::expect_bitwise_resume(run_bert, plus(bert_flags(data, vocab), {"--bf16", "--recompute-granularity", "full"}),
                              tmp.str(), 4, 2);
}

TEST_F(BertRun, RecomputationChangesNoBit) {
  test::expect_recompute_bitwise(run_bert, bert_flags(data, vocab), tmp.str(), 2);
}

TEST_F(BertRun, TheCheckpointRecordsBertAndTheOptimizer) {
  run_bert(bert_flags(data, vocab), {"--train-iters", "2", "--save", tmp / "run"});
  const std::string dir = resolve_checkpoint_dir(tmp / "run");
  const CheckpointState st = read_checkpoint_state(dir);
  EXPECT_EQ(st.meta.at("model_type"), "bert");
  EXPECT_EQ(st.iteration, 2);
  EXPECT_EQ(st.consumed_samples, 32u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/optimizer.safetensors"));
  // --finetune takes the weights and starts at iteration 0; a gpt flag set on it is refused.
  run_bert(bert_flags(data, vocab), {"--train-iters", "1", "--save", tmp / "tuned", "--load", tmp / "run", "--finetune"});
  EXPECT_EQ(test::training_lines(tmp / "tuned/metrics.jsonl").at(0).at("iteration"), 1);
  const std::string e = test::error_of([&] {
    run_bert(bert_flags(data, vocab), {"--train-iters", "3", "--load", tmp / "run", "--bert-no-binary-head"});
  });
  EXPECT_NE(e.find("the checkpoint does not match the model flags: bert_binary_head"), std::string::npos) << e;
}

TEST_F(BertRun, EvaluationReportsMaskedTokenAccuracy) {
  run_bert(set_flag(bert_flags(data, vocab), "--eval-interval", "40"), {"--train-iters", "40", "--save", tmp / "run"});
  std::vector<nlohmann::json> evals;
  std::ifstream in(tmp / "run/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_mlm_accuracy")) evals.push_back(j);
  }
  ASSERT_EQ(evals.size(), 2u);  // iterations 0 and 40
  EXPECT_EQ(evals[1]["iteration"], 40);
  EXPECT_GT(evals[1]["val_mlm_accuracy"].get<double>(), evals[0]["val_mlm_accuracy"].get<double>());
  EXPECT_LE(evals[1]["val_mlm_accuracy"].get<double>(), 1.0);
  EXPECT_LT(evals[1]["val_loss"].get<double>(), evals[0]["val_loss"].get<double>());
  EXPECT_TRUE(evals[1].contains("val_sop_loss"));
}

// What this slice does not build: exit 1 and a message naming the flag.
TEST_F(BertRun, UnbuiltFlagsAreRefusedByName) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const auto base = plus(bert_flags(data, vocab), {"--train-iters", "2"});
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--overlap-grad-reduce"}, "--overlap-grad-reduce is not available with --model-type bert"},
      {{"--context-parallel-size", "2"}, "--context-parallel-size 2 is not available"},
      {{"--fp16"}, "--fp16 is not available"},
      {{"--fp8-format", "e4m3"}, "--fp8-format is not available"},
      {{"--device", "cuda"}, "--device cuda is not available with --model-type bert"},
      {{"--num-experts", "4"}, "--model-type bert is dense only: --num-experts 4"},
      {{"--sft"}, "--sft does not apply to --model-type bert"},
      {{"--block-diffusion"}, "--block-diffusion does not apply to --model-type bert"},
      {{"--tensorboard-dir", tmp / "tb"}, "--tensorboard-dir is not available"},
      {{"--data-path", "1", data, "1", data}, "--data-path: --model-type bert takes one sentence-split prefix"},

      {{"--mask-prob", "0"}, "--mask-prob 0 must be in (0, 1)"},
  };
  for (const auto& [extra, message] : cases) {
    SCOPED_TRACE(message);
    const auto r = test::run_binary("pretrain_difflm", plus(base, extra), tmp / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find("pretrain_difflm: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
  // A tokenizer without [CLS] [SEP] [MASK] [PAD].
  const auto r = test::run_binary(
      "pretrain_difflm", plus(set_flag(base, "--tokenizer-type", "NullTokenizer"), {"--vocab-size", "1000"}), tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("--tokenizer-type NullTokenizer: --model-type bert needs BERT's WordPiece tokenizer"),
            std::string::npos)
      << r.output;
}

// Document-level data (one sentence per document) with the binary head: BertDataset's error names the
// file; the BERT flags on another model type are refused.
TEST_F(BertRun, DocumentLevelDataAndMisplacedFlagsAreRefused) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir docs("docs");
  const std::string flat = write_ordered_corpus(docs.str(), 50, 1);
  auto r = test::run_binary("pretrain_difflm", plus(bert_flags(flat, vocab), {"--train-iters", "2"}), tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find(flat + ": the train split gives no BERT sample with two sentences"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--split-sentences"), std::string::npos) << r.output;
  for (const char* flag : {"--mask-prob", "--short-seq-prob"}) {
    r = test::run_binary("pretrain_difflm", plus(test::tiny_difflm_flags(data), {flag, "0.2"}), tmp / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(std::string(flag) + " is for --model-type bert"), std::string::npos) << r.output;
  }
}
