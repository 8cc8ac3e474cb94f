// MarkerSplitTokenizer (tokenizers/marker_split_tokenizer.h): the placeholder is one id wherever it
// stands, the text around it is the base tokenizer's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizers/marker_split_tokenizer.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {
namespace {

std::unique_ptr<Tokenizer> byte_tokenizer_with(const std::string& token) {
  TokenizerSpec spec;
  spec.type = "ByteTokenizer";
  spec.added_special_tokens = {token};
  return make_tokenizer(spec);
}

TEST(MarkerSplitTokenizer, PlaceholderIsOneIdAnywhere) {
  const auto base = byte_tokenizer_with("<image>");
  const int32_t id = base->token_to_id("<image>");
  ASSERT_EQ(id, 257);
  EXPECT_EQ(base->encode("<image>").size(), 7u);  // the byte tokenizer alone splits it into bytes
  const MarkerSplitTokenizer tok(*base, "<image>", id);
  const std::pair<std::string, std::vector<int32_t>> cases[] = {
      {"<image>", {id}},
      {"a<image>", {'a', id}},
      {"<image>b", {id, 'b'}},
      {"<image><image>", {id, id}},
      {"x <image>\ny<image", {'x', ' ', id, '\n', 'y', '<', 'i', 'm', 'a', 'g', 'e'}},
      {"", {}},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(tok.encode(text), want) << text;
  EXPECT_EQ(tok.vocab_size(), base->vocab_size());
  EXPECT_EQ(tok.eod(), base->eod());
  EXPECT_EQ(tok.spec().added_special_tokens, std::vector<std::string>{"<image>"});
}

TEST(MarkerSplitTokenizer, RefusesAnIdOutsideTheVocabularyAndAddingTokens) {
  const auto base = byte_tokenizer_with("<image>");
  EXPECT_THROW(MarkerSplitTokenizer(*base, "<image>", 258), Error);
  EXPECT_THROW(MarkerSplitTokenizer(*base, "", 257), Error);
  MarkerSplitTokenizer tok(*base, "<image>", 257);
  EXPECT_THROW(tok.add_special_token("<x>"), Error);
}

}  // namespace
}  // namespace megadlm
