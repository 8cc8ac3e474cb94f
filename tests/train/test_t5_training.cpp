// pretrain_difflm --model-type t5 (train/t5_trainer.h): a tiny T5 (hidden 32, 2 + 2 layers) on
// bert_corpus.h's synthetic sentence-split corpus and WordPiece vocabulary. The span-corruption loss
// falls, a resume from a mid-run checkpoint is bitwise the uninterrupted run, the checkpoint records
// model_type t5 with its options (convert_checkpoint exports it) and the optimizer state, --finetune
// takes the weights, evaluation reports val_loss and val_ppl, bf16 follows fp32 and resumes bitwise,
// recomputation changes no bit, and every flag the trainer does not build is an exit 1 naming it. The data-parallel layouts: test_t5_layout_runs.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bert_corpus.h"
#include "checkpoint/native_checkpoint.h"
#include "family_runs.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"
#include "train/t5_trainer.h"
#include "train_fixture.h"

using namespace megadlm;
using test::field;
using test::mean;
using test::plus;
using test::set_flag;
using test::t5_flags;

namespace {

void run_t5(const std::vector<std::string>& flags, const std::vector<std::string>& extra) {
  T5Trainer t(test::parse_flags(plus(plus({"pretrain_difflm"}, flags), extra)));
  t.run();
}

struct T5Run : ::testing::Test {
  test::TempDir tmp;
  std::string vocab = test::write_bert_vocab(tmp.str());
  std::string data = test::write_ordered_corpus(tmp.str(), 300);
};

}  // namespace

TEST_F(T5Run, SpanCorruptionLossFalls) {
  run_t5(t5_flags(data, vocab), {"--train-iters", "100", "--save", tmp / "run"});
  const auto loss = field(tmp / "run", "loss"), lm = field(tmp / "run", "lm_loss");
  ASSERT_EQ(loss.size(), 100u);
  // Chance is ln 53 = 3.97 (41 WordPiece ids, [BOS], [EOS], 10 sentinels).
  EXPECT_GT(mean(loss, 0, 10), 3.0);
  EXPECT_LT(mean(loss, 90, 100), 0.75 * mean(loss, 0, 10)) << mean(loss, 0, 10) << " -> " << mean(loss, 90, 100);
  EXPECT_EQ(loss[99], lm[99]);
}

TEST_F(T5Run, ResumeIsBitwiseIdentical) {
  test::expect_bitwise_resume(run_t5, t5_flags(data, vocab), tmp.str(), 6, 3);
}

// bf16 (bf16 products): the loss follows fp32's and falls; a resume under bf16 with full recomputation
// is bitwise the uninterrupted run; recomputation changes no bit of the losses or the weights.
TEST_F(T5Run, Bf16FollowsFp32AndFalls) {
  test::expect_bf16_follows_fp32(run_t5, t5_flags(data, vocab), tmp.str(), 20, 1e-2, 5e-2, 0.95);
}

TEST_F(T5Run, Bf16ResumeWithRecomputationIsBitwiseIdentical) {
  test::expect_bitwise_resume(run_t5, plus(t5_flags(data, vocab), {"--bf16", "--recompute-granularity", "full"}),
                              tmp.str(), 4, 2);
}

TEST_F(T5Run, RecomputationChangesNoBit) {
  test::expect_recompute_bitwise(run_t5, t5_flags(data, vocab), tmp.str(), 2);
}

TEST_F(T5Run, TheCheckpointRecordsT5AndFinetuneTakesItsWeights) {
  run_t5(t5_flags(data, vocab), {"--train-iters", "2", "--save", tmp / "run"});
  const std::string dir = resolve_checkpoint_dir(tmp / "run");
  const CheckpointState st = read_checkpoint_state(dir);
  EXPECT_EQ(st.meta.at("model_type"), "t5");
  EXPECT_EQ(st.iteration, 2);
  EXPECT_EQ(st.consumed_samples, 32u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/optimizer.safetensors"));
  const auto& t5 = st.meta.at("t5");
  EXPECT_EQ(t5.at("num_decoder_layers"), 2);
  EXPECT_EQ(t5.at("relative_attention_num_buckets"), 8);
  EXPECT_EQ(t5.at("feed_forward_proj"), "relu");
  EXPECT_EQ(t5.at("scale_output"), true);
  // 41 WordPiece ids, then [BOS] 41, [EOS] 42, <extra_id_0> .. <extra_id_9> 43 .. 52.
  EXPECT_EQ(t5.at("pad_token_id"), 0);
  EXPECT_EQ(t5.at("decoder_start_token_id"), 41);
  EXPECT_EQ(t5.at("eos_token_id"), 42);
  EXPECT_EQ(st.meta.at("config").at("vocab_size"), 53);
  const auto added = st.meta.at("tokenizer").at("added_special_tokens");
  ASSERT_EQ(added.size(), 12u);
  EXPECT_EQ(added[2], "<extra_id_0>");
  // --finetune takes the weights and starts at iteration 0; another feed-forward is refused.
  run_t5(t5_flags(data, vocab), {"--train-iters", "1", "--save", tmp / "tuned", "--load", tmp / "run", "--finetune"});
  EXPECT_EQ(test::training_lines(tmp / "tuned/metrics.jsonl").at(0).at("iteration"), 1);
  const std::string e = test::error_of([&] {
    run_t5(t5_flags(data, vocab), {"--train-iters", "3", "--load", tmp / "run", "--t5-feed-forward", "gated-gelu"});
  });
  EXPECT_NE(e.find("the checkpoint does not match the model flags: feed_forward_proj"), std::string::npos) << e;
}

// The checkpoint's "t5" options are convert_checkpoint's: the trained model exports to HuggingFace.
TEST_F(T5Run, ATrainedCheckpointExportsToHuggingFace) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  run_t5(t5_flags(data, vocab), {"--train-iters", "1", "--save", tmp / "run", "--untie-embeddings-and-output-weights",
                                 "--t5-feed-forward", "gated-gelu"});
  const auto r = test::run_binary("convert_checkpoint", {"--from-native", tmp / "run", "--to-hf", tmp / "hf"}, tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  std::ifstream in(tmp / "hf/config.json");
  const auto cfg = nlohmann::json::parse(in);
  EXPECT_EQ(cfg.at("feed_forward_proj"), "gated-gelu");
  EXPECT_EQ(cfg.at("tie_word_embeddings"), false);
  EXPECT_EQ(cfg.at("vocab_size"), 53);
  EXPECT_EQ(cfg.at("decoder_start_token_id"), 41);
}

TEST_F(T5Run, EvaluationReportsLossAndPerplexity) {
  run_t5(set_flag(t5_flags(data, vocab), "--eval-interval", "30"), {"--train-iters", "30", "--save", tmp / "run"});
  std::vector<nlohmann::json> evals;
  std::ifstream in(tmp / "run/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss")) evals.push_back(j);
  }
  ASSERT_EQ(evals.size(), 2u);  // iterations 0 and 30
  EXPECT_EQ(evals[1]["iteration"], 30);
  EXPECT_LT(evals[1]["val_loss"].get<double>(), evals[0]["val_loss"].get<double>());
  EXPECT_DOUBLE_EQ(evals[1]["val_ppl"].get<double>(), std::exp(evals[1]["val_loss"].get<double>()));
}

// What the trainer does not build: exit 1 and a message naming the flag.
TEST_F(T5Run, UnbuiltFlagsAreRefusedByName) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const auto base = plus(t5_flags(data, vocab), {"--train-iters", "2"});
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--pipeline-model-parallel-size", "2"}, "--pipeline-model-parallel-size 2 is not available with --model-type t5"},
      {{"--context-parallel-size", "2"}, "--context-parallel-size 2 is not available with --model-type t5"},
      {{"--expert-model-parallel-size", "2"}, "--expert-model-parallel-size 2 is not available with --model-type t5"},
      {{"--sequence-parallel"}, "--sequence-parallel is not available with --model-type t5"},
      {{"--device", "cuda"}, "--device cuda is not available with --model-type t5"},
      {{"--fp16"}, "--fp16 is not available with --model-type t5"},
      {{"--fp8-format", "e4m3"}, "--fp8-format is not available with --model-type t5"},
      {{"--num-experts", "4"}, "--model-type t5 is dense only: --num-experts 4"},
      {{"--swiglu"}, "--swiglu does not apply to --model-type t5"},
      {{"--t5-feed-forward", "gated-silu"}, "--t5-feed-forward: feed_forward_proj 'gated-silu' is not built for T5"},
      {{"--normalization", "LayerNorm"}, "--model-type t5 needs --normalization RMSNorm"},
      {{"--position-embedding-type", "rope"}, "--model-type t5 has no position embedding of its own"},
      {{"--sft"}, "--sft does not apply to --model-type t5"},
      {{"--mask-prob", "0"}, "--mask-prob 0 must be in (0, 1)"},
      {{"--data-path", "1", data, "1", data}, "--data-path: --model-type t5 takes one sentence-split prefix"},
  };
  auto expect_refused = [&](const std::vector<std::string>& flags, const std::string& message) {
    SCOPED_TRACE(message);
    const auto r = test::run_binary("pretrain_difflm", flags, tmp / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find("pretrain_difflm: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  };
  for (const auto& [extra, message] : cases) expect_refused(plus(base, extra), message);
  // The dataset's errors: the longest text (48 tokens) makes a target of 10 rows in 2 spans.
  expect_refused(set_flag(base, "--decoder-seq-length", "8"), "--decoder-seq-length 8 is too short");
  expect_refused(set_flag(base, "--vocab-extra-ids", "1"), "only 1 sentinel ids are given (--vocab-extra-ids)");
  // A tokenizer without a padding token; the T5 flags on another model type.
  expect_refused(plus(set_flag(base, "--tokenizer-type", "NullTokenizer"), {"--vocab-size", "1000"}),
                 "--tokenizer-type NullTokenizer: --model-type t5 needs a padding token");
  expect_refused(plus(test::tiny_difflm_flags(data), {"--decoder-seq-length", "16"}),
                 "--decoder-seq-length is for --model-type t5");
}

// The ids t5_tokens_for takes: the tokenizer's own where it has them, added ones after its vocabulary.
TEST(T5Tokens, PadBosEosAndSentinels) {
  test::TempDir tmp;
  TokenizerSpec spec;
  spec.type = "BertWordPieceLowerCase";
  spec.vocab_file = test::write_bert_vocab(tmp.str());
  auto tok = make_tokenizer(spec);
  const T5Tokens t = t5_tokens_for(*tok, 3);
  EXPECT_EQ(t.pad, 0);
  EXPECT_EQ(t.bos, 41);
  EXPECT_EQ(t.eos, 42);
  EXPECT_EQ(t.sentinels, (std::vector<int32_t>{43, 44, 45}));
  EXPECT_EQ(tok->vocab_size(), 46);
  // A second call finds them all again.
  const T5Tokens again = t5_tokens_for(*tok, 3);
  EXPECT_EQ(again.sentinels, t.sentinels);
  EXPECT_EQ(again.bos, 41);
  EXPECT_EQ(tok->vocab_size(), 46);
}
