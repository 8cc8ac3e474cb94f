#pragma once
// The two tokenizers without a model file:
//   NullTokenizer  Megatron's: the text already holds ids, written as space-separated decimals
//                  ("12 7 31"). --vocab-size N gives ids 0..N-1 plus eod = N, so vocab_size() = N + 1
//                  and eod() = vocab_size() - 1, as in Megatron.
//   ByteTokenizer  one id per byte (0..255) and eod <|endoftext|> = 256: for tests and tiny demos.
// Neither recognises special tokens inside the text; added special tokens take the next free ids.
#include <string>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace megadlm {

class NullTokenizer : public Tokenizer {
 public:
  explicit NullTokenizer(const TokenizerSpec& spec);

  using Tokenizer::decode;
  using Tokenizer::encode;
  // Throws Error naming the offending word when the text holds something other than ids in range.
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  int64_t vocab_size() const override { return base_ + 1 + static_cast<int64_t>(added_.size()); }
  int32_t eod() const override { return static_cast<int32_t>(base_); }
  int32_t token_to_id(std::string_view token) const override;  // "17" -> 17, or an added name
  int32_t add_special_token(const std::string& token) override;

 private:
  int64_t base_ = 0;  // N
  std::vector<std::string> added_;  // ids N + 1 + i
};

class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(const TokenizerSpec& spec);

  using Tokenizer::decode;
  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  int64_t vocab_size() const override { return 256 + static_cast<int64_t>(specials_.size()); }
  int32_t eod() const override { return 256; }
  int32_t token_to_id(std::string_view token) const override;  // a one-byte string or a special name
  int32_t add_special_token(const std::string& token) override;

 private:
  std::vector<std::string> specials_{"<|endoftext|>"};  // ids 256 + i
};

}  // namespace megadlm
