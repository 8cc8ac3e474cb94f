#pragma once
// BERT's WordPiece tokenizer, Megatron's --tokenizer-type BertWordPieceLowerCase / BertWordPieceCase
// with --vocab-file vocab.txt, giving the ids of HuggingFace's BertTokenizerFast(vocab_file,
// do_lower_case=...) with add_special_tokens=False:
//   1. special tokens ([PAD] [UNK] [CLS] [SEP] [MASK] and added ones) are split out of the raw text
//      (leftmost-longest), as `tokenizers` does with its added tokens;
//   2. BertNormalizer: drop NUL, U+FFFD and control characters, whitespace to ' ', spaces around CJK
//      ideographs; uncased also strips accents (NFD, drop non-spacing marks) and lowercases;
//   3. BertPreTokenizer: split on whitespace, each punctuation character a word of its own;
//   4. WordPiece: greedy longest-match-first with the "##" continuation prefix; a word longer than
//      100 characters, or one with a piece no token matches, becomes [UNK].
// The character classes come from bert_tables.inc (tools/reference/gen_bert_tables.py), read off
// `tokenizers` so that its Unicode versions are matched. Bytes that are not valid UTF-8 are read as
// U+FFFD, which step 2 drops (as Python's decode(errors="replace") then BertTokenizerFast would).
//
// Vocabulary: vocab.txt, one token per line, id = line number - 1. Megatron's BertWordPieceTokenizer
// looks up [CLS] [SEP] [PAD] [MASK] by name, and encoding needs [UNK], so all five must be present.
// Megatron's class defines no eod; here eod() is [SEP], the token BERT ends each segment with.
// Megatron also appends [BOS] and [EOS] to the vocabulary; this tokenizer does not (vocab_size() is
// the line count plus added special tokens), so the ids match BertTokenizerFast's.
//
// decode() is `tokenizers`' WordPiece decoder with cleanup: a token starting with "##" joins the one
// before it without the prefix, any other token after the first gets a space before it, and " ." " ?"
// " !" " ," (and the contractions the decoder lists) lose that space.
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace megadlm {

// BertNormalizer (step 2): clean_text, handle_chinese_chars, and for `lower_case` strip_accents and
// lowercase. The result is valid UTF-8.
std::string bert_normalize(std::string_view text, bool lower_case);
// BertPreTokenizer (step 3): calls word_fn with each word of normalized text, in order.
void bert_split_words(std::string_view normalized, const std::function<void(std::string_view)>& word_fn);

class WordPieceTokenizer : public Tokenizer {
 public:
  explicit WordPieceTokenizer(const TokenizerSpec& spec);  // throws Error naming vocab.txt and the line

  using Tokenizer::decode;
  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int32_t eod() const override { return sep_; }
  int32_t token_to_id(std::string_view token) const override;
  int32_t add_special_token(const std::string& token) override;

  int32_t cls() const { return cls_; }
  int32_t sep() const { return sep_; }
  int32_t pad() const { return pad_; }
  int32_t mask() const { return mask_; }
  int32_t unk() const { return unk_; }
  bool lower_case() const { return lower_case_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  void load_vocab(const std::string& path);
  int32_t required_token(const char* name, const std::string& path) const;
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Length of the special token that starts at text[pos], 0 when none does; *id gets its id.
  size_t special_at(std::string_view text, size_t pos, int32_t* id) const;

  bool lower_case_ = true;
  std::vector<std::string> tokens_;  // id -> token: vocab.txt's lines, then added special tokens
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  void add_special_id(int32_t id);  // splits the token out of the raw text from now on

  std::vector<int32_t> specials_;  // ids split out of the raw text: the five, then added ones
  bool special_first_byte_[256] = {};  // some special token starts with this byte
  size_t max_token_bytes_ = 0;     // longest vocabulary token, "##" included
  int32_t pad_ = -1, unk_ = -1, cls_ = -1, sep_ = -1, mask_ = -1;
};

// ---- training ------------------------------------------------------------------------------------

struct WordPieceTrainerOptions {
  int64_t vocab_size = 0;  // special tokens included
  std::vector<std::string> special_tokens{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};  // ids 0, 1, ...
  int64_t min_frequency = 2;      // a pair seen fewer times is not merged
  int64_t limit_alphabet = 1000;  // the most frequent characters kept (`tokenizers`' default for BERT)
};

// WordPiece training in the manner of `tokenizers`' WordPieceTrainer: BPE over the words of BERT's
// normalizer and pre-tokenizer, with the "##" prefix on every symbol but a word's first. The
// vocabulary is the special tokens, then the alphabet (its `limit_alphabet` most frequent characters,
// ties to the smaller code point, in code-point order; other characters are left out of the words),
// then the "##" forms of the characters that continue a word (code-point order), then one token per
// merge: a + b without its "##". `tokenizers` numbers the "##" forms in the order its threads meet
// them, so its ids are not reproducible; these are.
class WordPieceTrainer {
 public:
  explicit WordPieceTrainer(bool lower_case) : lower_case_(lower_case) {}
  void add_text(std::string_view text);  // normalizes, splits into words and counts them
  size_t distinct_words() const { return counts_.size(); }
  // vocab.txt's lines, by id. Throws Error when the options leave no room for a token.
  std::vector<std::string> train(const WordPieceTrainerOptions& options) const;

 private:
  bool lower_case_;
  std::unordered_map<std::string, int64_t> counts_;  // word -> occurrences
};

}  // namespace megadlm
