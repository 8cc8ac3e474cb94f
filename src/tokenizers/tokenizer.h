#pragma once
// One interface for every tokenizer, selected with Megatron's --tokenizer-type:
//   GPT2BPETokenizer        --vocab-file vocab.json --merge-file merges.txt
//   HuggingFaceTokenizer    --tokenizer-model tokenizer.json (BPE, byte-level or regex pre-tokenizer)
//   SentencePieceTokenizer  --tokenizer-model x.model (also Llama2Tokenizer)
//   NullTokenizer           --vocab-size N (ids written as decimal text)
//   ByteTokenizer           256 byte ids + specials (tests and tiny demos)
//   BertWordPieceLowerCase  --vocab-file vocab.txt (BERT WordPiece, uncased; also BertWordPieceCase)
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace megadlm {

// What is needed to rebuild a tokenizer; written as a sidecar beside preprocessed data
// (<prefix>.tokenizer.json) and into checkpoints, so training finds the tokenizer without flags.
struct TokenizerSpec {
  std::string type;             // one of the --tokenizer-type names above
  std::string vocab_file;       // GPT2BPETokenizer (vocab.json), BertWordPiece* (vocab.txt)
  std::string merge_file;       // GPT2BPETokenizer
  std::string tokenizer_model;  // HuggingFaceTokenizer (tokenizer.json), SentencePieceTokenizer (.model)
  int64_t null_vocab_size = 0;  // NullTokenizer
  std::vector<std::string> added_special_tokens;  // appended after the base vocabulary, in order

  nlohmann::json to_json() const;
  static TokenizerSpec from_json(const nlohmann::json& j);  // throws Error naming the missing key
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` (UTF-8) to `out`. Special tokens in the text are recognised only by
  // tokenizers whose format defines them (HuggingFace added tokens).
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> ids;
    encode(text, ids);
    return ids;
  }
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }

  virtual int64_t vocab_size() const = 0;  // including added tokens
  virtual int32_t eod() const = 0;         // end-of-document id
  virtual int32_t token_to_id(std::string_view token) const = 0;  // -1 when absent
  // Adds a special token at the end of the vocabulary (or returns its id if it exists already).
  virtual int32_t add_special_token(const std::string& token) = 0;

  const TokenizerSpec& spec() const { return spec_; }

 protected:
  TokenizerSpec spec_;
};

// Builds the tokenizer a spec describes (and adds its added_special_tokens); throws Error naming the
// file or field at fault.
// load_threads > 1 lets a tokenizer whose files are large (GPT2BPETokenizer) build its tables on two
// threads; preprocess_data passes its worker count, so one worker means one thread.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec, int load_threads = 1);

// The whole content of a tokenizer file; throws Error naming `what` and the path when it can't be read.
std::string read_tokenizer_file(const std::string& path, std::string_view what);

}  // namespace megadlm
