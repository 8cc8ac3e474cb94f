#include "tokenizers/tokenizer_sentencepiece.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

#ifdef MEGADLM_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace megadlm {

#ifdef MEGADLM_HAVE_SENTENCEPIECE

namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const TokenizerSpec& spec) {
    spec_ = spec;
    spec_.added_special_tokens.clear();
    MEGADLM_CHECK(!spec.tokenizer_model.empty(), spec.type, " needs --tokenizer-model (a SentencePiece .model file)");
    // Read the file ourselves so a missing file and a corrupt one give distinct messages.
    const std::string bytes = read_tokenizer_file(spec.tokenizer_model, "SentencePiece model");
    const auto status = sp_.LoadFromSerializedProto(bytes);
    MEGADLM_CHECK(status.ok(), "SentencePiece model '", spec.tokenizer_model, "' cannot be loaded: ", status.ToString());
    pieces_ = sp_.GetPieceSize();
    eod_ = sp_.eos_id();
    if (eod_ < 0) {  // not recorded in spec_: rebuilding the same model appends it again
      eod_ = pieces_;
      added_.push_back("<EOD>");
    }
    for (const std::string& t : spec.added_special_tokens) add_special_token(t);
  }

  using Tokenizer::decode;
  using Tokenizer::encode;

  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    MEGADLM_CHECK(status.ok(), "SentencePiece '", spec_.tokenizer_model, "': encode failed: ", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  // Runs of model ids go through SentencePiece (which joins pieces and turns ▁ into spaces); added
  // tokens are spliced in as their text.
  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string piece;
      const auto status = sp_.Decode(run, &piece);
      MEGADLM_CHECK(status.ok(), "SentencePiece '", spec_.tokenizer_model, "': decode failed: ", status.ToString());
      out += piece;
      run.clear();
    };
    for (size_t i = 0; i < n; ++i) {
      const int32_t id = ids[i];
      MEGADLM_CHECK(id >= 0 && id < vocab_size(), "SentencePiece '", spec_.tokenizer_model, "': cannot decode id ", id,
                    " (vocabulary size ", vocab_size(), ")");
      if (id < pieces_) {
        run.push_back(id);
      } else {
        flush();
        out += added_[id - pieces_];
      }
    }
    flush();
    return out;
  }

  int64_t vocab_size() const override { return pieces_ + static_cast<int64_t>(added_.size()); }
  int32_t eod() const override { return eod_; }

  int32_t token_to_id(std::string_view token) const override {
    const int id = sp_.PieceToId(token);  // returns unk_id for unknown pieces
    if (id >= 0 && id < pieces_ && sp_.IdToPiece(id) == token) return id;
    for (size_t i = 0; i < added_.size(); ++i)
      if (added_[i] == token) return static_cast<int32_t>(pieces_ + i);
    return -1;
  }

  int32_t add_special_token(const std::string& token) override {
    MEGADLM_CHECK(!token.empty(), "add_special_token: the token is empty");
    int32_t id = token_to_id(token);
    if (id < 0) {
      id = static_cast<int32_t>(vocab_size());
      added_.push_back(token);
    }
    auto& list = spec_.added_special_tokens;
    if (std::find(list.begin(), list.end(), token) == list.end()) list.push_back(token);
    return id;
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
  int32_t pieces_ = 0;
  int32_t eod_ = -1;
  std::vector<std::string> added_;  // ids pieces_ + i
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const TokenizerSpec& spec) {
  return std::make_unique<SentencePieceTokenizer>(spec);
}

#else  // !MEGADLM_HAVE_SENTENCEPIECE

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const TokenizerSpec& spec) {
  fail(spec.type, " '", spec.tokenizer_model,
       "': this build has no SentencePiece support (install libsentencepiece-dev and re-run cmake)");
}

#endif

}  // namespace megadlm
