// --model-type bert where it is not built: each program refuses it with an Error naming the flag and
// what is missing (exit status 1), never a half-working run. pretrain_difflm trains BERT on the CPU
// (tests/train/test_bert_training.cpp) and refuses the other model types' flags on it; BERT is dense
// only; generate cannot run a bert checkpoint; convert_checkpoint's bert layout takes BERT models only, and BERT models that layout only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/hf_config.h"
#include "child_process.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

namespace {

std::string fixture(const std::string& name) {
  return std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/" + name;
}

std::string scratch_dir() {
  return (fs::temp_directory_path() / ("megadlm_bert_refusals_" + std::to_string(::getpid()))).string();
}

// Removes this process's scratch directory at exit.
struct ScratchCleanup {
  ~ScratchCleanup() { fs::remove_all(scratch_dir()); }
} scratch_cleanup;

std::string scratch(const std::string& name) {
  fs::create_directories(scratch_dir());
  return scratch_dir() + "/" + name;
}

void expect_refusal(const std::string& program, const std::vector<std::string>& args, const std::string& message) {
  const auto r = test::run_binary(program, args, scratch("log.txt"));
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find(program + ": error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
}

std::vector<std::string> bert_train_flags() {
  std::vector<std::string> f = test::tiny_difflm_flags(scratch("no_data"));
  f[1] = "bert";  // --model-type
  return f;
}

TEST(BertRefusals, PretrainDifflmNamesWhatBertTrainingLacks) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  // pretrain_difflm trains BERT (tests/train/test_bert_training.cpp); a difflm flag set on it is
  // refused by name, and so is a tokenizer without BERT's special tokens.
  expect_refusal("pretrain_difflm", bert_train_flags(), "--mask-token does not apply to --model-type bert");
  const std::vector<std::string> null_tokenizer = {
      "--model-type", "bert", "--num-layers", "1", "--hidden-size", "32", "--num-heads", "4", "--seq-length", "16",
      "--data-path", scratch("no_data"), "--tokenizer-type", "NullTokenizer", "--vocab-size", "64"};
  expect_refusal("pretrain_difflm", null_tokenizer,
                 "--tokenizer-type NullTokenizer: --model-type bert needs BERT's WordPiece tokenizer");
  expect_refusal("pretrain_difflm", test::plus(null_tokenizer, {"--bert-no-binary-head"}), "[CLS]");
}

TEST(BertRefusals, BertIsDenseOnly) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  expect_refusal("pretrain_difflm", test::plus(bert_train_flags(), {"--num-experts", "4"}),
                 "--model-type bert is dense only: --num-experts 4 is not available for it");
}

TEST(BertRefusals, TheBinaryHeadFlagIsForBertOnly) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  expect_refusal("pretrain_difflm", test::plus(test::tiny_difflm_flags(scratch("no_data")), {"--bert-no-binary-head"}),
                 "--bert-no-binary-head is for --model-type bert");
}

TEST(BertRefusals, GenerateAndLoadHfDoNotTakeBert) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  MEGADLM_REQUIRE_BINARY("generate");
  const std::string native = scratch("bert_native");
  fs::remove_all(native);
  const auto r = test::run_binary("convert_checkpoint", {"--from-hf", fixture("hf_bert"), "--to-native", native},
                                  scratch("log.txt"));
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  expect_refusal("generate", {"--load", native, "--prompt", "x"}, "a bert model: generate runs gpt and difflm");
  // --load-hf reads config.json through the gpt / difflm translation, which names BERT's own path.
  const std::string msg = test::error_of([] {
    hf_config_to_info(nlohmann::json::parse(R"({"model_type": "bert", "architectures": ["BertForMaskedLM"]})"), "c.json");
  });
  EXPECT_NE(msg.find("c.json: a BERT model (BertForMaskedLM): convert_checkpoint converts it"), std::string::npos) << msg;
}

TEST(BertRefusals, ConvertCheckpointKeepsTheBertLayoutToBert) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  expect_refusal("convert_checkpoint",
                 {"--from-hf", fixture("hf_llama"), "--to-native", scratch("x"), "--model-type", "bert"},
                 "--model-type bert: " + fixture("hf_llama") + "/config.json is not a BERT model");
  expect_refusal("convert_checkpoint",
                 {"--from-hf", fixture("hf_bert"), "--to-native", scratch("y"), "--model-type", "gpt"},
                 "holds a BERT model: it converts to --model-type bert, not gpt");
  const std::string gpt = scratch("gpt_native"), bert = scratch("bert_native2");
  fs::remove_all(gpt);
  fs::remove_all(bert);
  auto r = test::run_binary("convert_checkpoint", {"--from-hf", fixture("hf_gpt2"), "--to-native", gpt}, scratch("log.txt"));
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  r = test::run_binary("convert_checkpoint", {"--from-hf", fixture("hf_bert"), "--to-native", bert}, scratch("log.txt"));
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  expect_refusal("convert_checkpoint", {"--from-native", gpt, "--to-hf", scratch("z"), "--layout", "bert"},
                 "--layout bert is for bert models");
  expect_refusal("convert_checkpoint", {"--from-native", bert, "--to-hf", scratch("w"), "--layout", "llama"},
                 "holds a bert model, which exports to --layout bert only");
  EXPECT_FALSE(fs::exists(scratch("w") + "/config.json"));
}

}  // namespace
