#pragma once
// A tokenizer that recognises one special token's text wherever it stands in the input (LLaVA's
// "<image>" placeholder), whatever the tokenizer underneath: the text is cut at each occurrence, the
// pieces are encoded by the base tokenizer, and the token's id stands between them. HuggingFace's
// tokenizers do this for their added tokens; GPT-2's BPE, WordPiece and the byte tokenizer do not, so
// preprocess_data puts this in front of every one of them for the image placeholder.
#include <string>

#include "tokenizers/tokenizer.h"

namespace megadlm {

class MarkerSplitTokenizer : public Tokenizer {
 public:
  // base must outlive this; id is the marker's id in base's vocabulary.
  MarkerSplitTokenizer(const Tokenizer& base, std::string marker, int32_t id);

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(const int32_t* ids, size_t n) const override { return base_.decode(ids, n); }
  int64_t vocab_size() const override { return base_.vocab_size(); }
  int32_t eod() const override { return base_.eod(); }
  int32_t token_to_id(std::string_view token) const override { return base_.token_to_id(token); }
  int32_t add_special_token(const std::string& token) override;  // an Error: add it to the base

  const std::string& marker() const { return marker_; }
  int32_t marker_id() const { return id_; }

 private:
  const Tokenizer& base_;
  std::string marker_;
  int32_t id_;
};

}  // namespace megadlm
