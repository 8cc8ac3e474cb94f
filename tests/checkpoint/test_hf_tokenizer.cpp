// Tokenizer files carried between HuggingFace directories and native checkpoints: the spec recorded
// on import rebuilds the same tokenizer from the copies, and a mask token we appended is written into
// the exported tokenizer.json with the id our tokenizer gave it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_tokenizer.h"
#include "checkpoint/safetensors.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

const std::string kTokDir = std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/hf_tokenizer";

std::string temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string p = (fs::temp_directory_path() / ("megadlm_hftok_" + std::to_string(::getpid()) + "_" + info->name())).string();
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST(HfTokenizer, ImportCopiesFilesAndRecordsASpec) {
  const std::string tmp = temp_dir();
  const TokenizerSpec s = import_hf_tokenizer(kTokDir, tmp + "/tok");
  EXPECT_EQ(s.type, "HuggingFaceTokenizer");
  EXPECT_EQ(s.tokenizer_model, fs::absolute(tmp + "/tok/tokenizer.json").lexically_normal().string());
  EXPECT_TRUE(fs::exists(tmp + "/tok/tokenizer_config.json"));
  const auto a = make_tokenizer(s);
  const auto b = make_tokenizer(hf_tokenizer_spec(kTokDir));
  EXPECT_EQ(a->vocab_size(), b->vocab_size());
  EXPECT_EQ(a->encode("The jury said it was a fine day."), b->encode("The jury said it was a fine day."));
  EXPECT_EQ(hf_tokenizer_spec(tmp).type, "");  // no tokenizer files: empty spec
  fs::remove_all(tmp);
}

TEST(HfTokenizer, ExportAddsAppendedMaskToken) {
  const std::string tmp = temp_dir();
  TokenizerSpec s = hf_tokenizer_spec(kTokDir);
  s.added_special_tokens = {"<|mask|>"};
  const auto ours = make_tokenizer(s);
  const int32_t mask = ours->token_to_id("<|mask|>");
  EXPECT_EQ(mask, ours->vocab_size() - 1);
  const auto files = export_hf_tokenizer(s, tmp + "/hf");
  EXPECT_EQ(files, (std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  const nlohmann::json j = nlohmann::json::parse(read_file(tmp + "/hf/tokenizer.json"));
  bool found = false;
  for (const auto& t : j["added_tokens"])
    if (t["content"] == "<|mask|>") {
      found = true;
      EXPECT_EQ(t["id"], mask);
      EXPECT_EQ(t["special"], true);
    }
  EXPECT_TRUE(found);
  // The exported file alone now knows the token, with the same id.
  const auto back = make_tokenizer(hf_tokenizer_spec(tmp + "/hf"));
  EXPECT_EQ(back->token_to_id("<|mask|>"), mask);
  EXPECT_EQ(back->vocab_size(), ours->vocab_size());
  fs::remove_all(tmp);
}

TEST(HfTokenizer, Gpt2VocabAndMerges) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  const std::string tmp = temp_dir();
  fs::copy_file(vocab, tmp + "/vocab.json");
  fs::copy_file(fs::path(vocab).parent_path() / "merges.txt", tmp + "/merges.txt");
  const TokenizerSpec s = import_hf_tokenizer(tmp, tmp + "/copy");
  EXPECT_EQ(s.type, "GPT2BPETokenizer");
  EXPECT_TRUE(fs::exists(tmp + "/copy/vocab.json") && fs::exists(tmp + "/copy/merges.txt"));
  const auto files = export_hf_tokenizer(s, tmp + "/out");
  EXPECT_EQ(files, (std::vector<std::string>{"vocab.json", "merges.txt"}));
  fs::remove_all(tmp);
}
