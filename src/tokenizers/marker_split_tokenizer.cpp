#include "tokenizers/marker_split_tokenizer.h"

#include "core/error.h"

namespace megadlm {

MarkerSplitTokenizer::MarkerSplitTokenizer(const Tokenizer& base, std::string marker, int32_t id)
    : base_(base), marker_(std::move(marker)), id_(id) {
  MEGADLM_CHECK(!marker_.empty(), "the special token to split at is empty");
  MEGADLM_CHECK(id_ >= 0 && id_ < base_.vocab_size(), "the special token '", marker_, "' has id ", id_,
                ", outside the tokenizer's vocabulary of ", base_.vocab_size());
  spec_ = base_.spec();
}

void MarkerSplitTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  for (;;) {
    const size_t at = text.find(marker_);
    if (at == std::string_view::npos) break;
    if (at > 0) base_.encode(text.substr(0, at), out);
    out.push_back(id_);
    text.remove_prefix(at + marker_.size());
  }
  if (!text.empty()) base_.encode(text, out);
}

int32_t MarkerSplitTokenizer::add_special_token(const std::string& token) {
  fail("cannot add the special token '", token, "' to a tokenizer that splits at '", marker_,
       "': add it to the tokenizer underneath");
}

}  // namespace megadlm
