#pragma once
// GPT2BPETokenizer: Megatron's --tokenizer-type GPT2BPETokenizer, the byte-level BPE model
// (byte_level_bpe.h) over vocab.json + merges.txt with the GPT-2 pre-tokenizer pattern.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizers/byte_level_bpe.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {

// vocab.json + merges.txt as released with GPT-2. Text is split with the GPT-2 pattern; special tokens
// in the text are not recognised (as in Megatron's GPT2BPETokenizer). eod is <|endoftext|> (50256 for
// GPT-2); a vocabulary without it gets it appended as a special token.
class GPT2BPETokenizer : public Tokenizer {
 public:
  // load_threads > 1: merges.txt is parsed while vocab.json is, and the tables are built on two threads.
  explicit GPT2BPETokenizer(const TokenizerSpec& spec, int load_threads = 1);
  ~GPT2BPETokenizer() override;

  using Tokenizer::decode;
  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  int64_t vocab_size() const override { return bpe_->size() + static_cast<int64_t>(added_.size()); }
  int32_t eod() const override { return eod_; }
  int32_t token_to_id(std::string_view token) const override;
  int32_t add_special_token(const std::string& token) override;

 private:
  std::unique_ptr<ByteLevelBPE> bpe_;
  std::vector<std::string> added_;  // ids bpe_->size() + i
  int32_t eod_ = -1;
};

}  // namespace megadlm
