#pragma once
// HuggingFaceTokenizer: a `tokenizers` tokenizer.json holding a byte-level BPE (GPT-2, GPT-J, RoBERTa,
// LLaMA-3, Qwen2 style, and what our train_tokenizer writes), and the byte-level BPE trainer that
// writes such files.
//
// What is read (anything else that would change the ids is an Error naming the field):
//   model            type BPE; vocab; merges as "a b" strings or ["a", "b"] pairs; ignore_merges;
//                    dropout must be null/0, continuing_subword_prefix / end_of_word_suffix empty.
//                    (unk_token, byte_fallback and fuse_unk never act: all 256 bytes have tokens.)
//   normalizer       null or NFC (GPT-NeoX, Qwen2).
//   pre_tokenizer    ByteLevel{add_prefix_space, use_regex}, or Sequence[Split{Regex: one of the
//                    patterns of pretokenizer.h, behavior Isolated}, ByteLevel{use_regex: false}].
//   decoder          ByteLevel (or null, read as ByteLevel).
//   added_tokens     split out of the text before BPE (leftmost-longest; first the tokens with
//                    normalized = false, then the others, as `tokenizers` does), lstrip / rstrip
//                    honoured, single_word rejected.
//   post_processor, truncation, padding: ignored. encode() adds no BOS/EOS (as
//                    add_special_tokens=False); the data pipeline appends eod itself.
// eod: the eos_token of a tokenizer_config.json beside the file when there is one, else the first of
// <|endoftext|>, <|end_of_text|>, </s>, <eos> that exists, else <|endoftext|> is appended as a new
// special token.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizers/byte_level_bpe.h"
#include "tokenizers/pretokenizer.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {

class HuggingFaceTokenizer : public Tokenizer {
 public:
  explicit HuggingFaceTokenizer(const TokenizerSpec& spec);  // spec.tokenizer_model = tokenizer.json
  // From an already parsed tokenizer.json; `source` names it in errors and locates tokenizer_config.json.
  HuggingFaceTokenizer(const nlohmann::json& j, const std::string& source);
  ~HuggingFaceTokenizer() override;

  using Tokenizer::decode;
  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return eod_; }
  int32_t token_to_id(std::string_view token) const override;  // added content or vocabulary spelling
  int32_t add_special_token(const std::string& token) override;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool lstrip, rstrip, normalized, special;
  };

  // `from_file`: look for a tokenizer_config.json beside `source` (for eod).
  void load(const nlohmann::json& j, const std::string& source, bool from_file);
  // `match_in_text`: encode() splits the token's text out of the input (every token of the file).
  void register_added(const AddedToken& t, bool match_in_text = true);
  void encode_segment(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;
  void encode_phase(int phase, const uint8_t* p, size_t n, std::vector<int32_t>& out) const;

  std::unique_ptr<ByteLevelBPE> bpe_;
  bool nfc_ = false;  // normalizer NFC
  bool add_prefix_space_ = false;
  bool split_ = true;  // false: ByteLevel with use_regex = false and no Split (one piece per segment)
  PretokenizerPattern pattern_ = PretokenizerPattern::Gpt2;
  std::vector<AddedToken> added_;
  std::vector<int32_t> added_index_of_id_;  // [vocab_size_] -> index into added_, or -1
  // Added tokens by phase (0: normalized = false, 1: normalized = true) in a byte trie, for the
  // longest match at a position in O(its length); node 0 is the root.
  struct TrieNode {
    int32_t token = -1;  // index into added_ when a token ends here
    std::vector<std::pair<uint8_t, int32_t>> edges;
  };
  std::vector<TrieNode> trie_[2];
  bool first_byte_[2][256] = {};  // [phase][byte]: some added token of the phase starts so
  int64_t vocab_size_ = 0;
  int32_t eod_ = -1;
};

// ---- training -------------------------------------------------------------------------------------

struct BpeTrainerOptions {
  int64_t vocab_size = 0;  // including the special tokens and the 256 byte tokens
  std::vector<std::string> special_tokens{"<|endoftext|>"};  // ids 0, 1, ... in this order
  int64_t min_frequency = 2;  // a pair seen fewer times is not merged
};

// Byte-level BPE training in the manner of `tokenizers`' BpeTrainer with ByteLevel pre-tokenization
// (ByteLevelBPETokenizer.train): pieces are counted, ids go to the special tokens, then the 256 byte
// characters in code-point order, then one per merge; each step merges the most frequent pair (ties:
// the pair of smaller ids).
class ByteLevelBpeTrainer {
 public:
  void add_text(std::string_view text);  // splits with the GPT-2 pattern and counts the pieces
  size_t distinct_pieces() const { return counts_.size(); }
  // A complete tokenizer.json (HuggingFace format: BPE model, ByteLevel pre-tokenizer, decoder and
  // post-processor, the special tokens as added tokens).
  nlohmann::ordered_json train(const BpeTrainerOptions& options) const;

 private:
  std::unordered_map<std::string, int64_t> counts_;  // piece (raw bytes) -> occurrences
};

}  // namespace megadlm
