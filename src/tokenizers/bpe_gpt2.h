#pragma once
// Byte-level BPE as GPT-2 defined it, in three parts:
//   1. the pre-tokenizer: a regex splits text into pieces ("words"); we match the few regexes that real
//      tokenizers use by hand (std::regex has no \p{L} and is slow);
//   2. the byte-level model: each piece is taken as bytes, every byte is a base token, and the merge
//      list (pairs of tokens, by rank) is applied lowest rank first until no pair of neighbours merges;
//   3. GPT2BPETokenizer: Megatron's --tokenizer-type GPT2BPETokenizer over vocab.json + merges.txt.
// The HuggingFace tokenizer.json loader (tokenizer_hf.h) reuses parts 1 and 2.
//
// Any bytes can be encoded: the regexes run on code points, and a byte that is not valid UTF-8 counts
// as one character of its own that is neither letter, number nor space (see unicode.h); byte-level BPE
// then encodes it like any byte, and decode(encode(x)) == x for every byte string x.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace megadlm {

// ---- 1. pre-tokenizer -----------------------------------------------------------------------------

// The split regexes we know (exact strings in kPretokenizerRegex):
//   Gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//           (GPT-2, GPT-J, GPT-NeoX, RoBERTa: also what ByteLevel{use_regex: true} means)
//   Llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2   the same with \p{N} (single digits) in place of \p{N}{1,3}
enum class PretokenizerPattern { Gpt2, Llama3, Qwen2 };
extern const char* const kPretokenizerRegex[3];

// The pattern whose regex is exactly `regex`; throws Error quoting it and naming `where` otherwise.
PretokenizerPattern pattern_from_regex(const std::string& regex, const std::string& where);

// End (exclusive byte offset) of the piece that starts at `pos` < n, i.e. of the regex match found
// there: every pattern above matches at every position, so pieces tile the text.
size_t next_piece(PretokenizerPattern pattern, const uint8_t* text, size_t n, size_t pos);

// Splits `text` into pieces: [begin, end) byte offsets (test and debug helper).
std::vector<std::pair<size_t, size_t>> split_pieces(PretokenizerPattern pattern, std::string_view text);

// ---- 2. the byte-level BPE model -----------------------------------------------------------------

// GPT-2's bytes_to_unicode: byte b is written as the code point byte_to_unicode()[b] in vocab and
// merges files (printable bytes stand for themselves, the others are shifted to U+0100 and up).
const std::array<uint32_t, 256>& byte_to_unicode();
std::string bytes_to_byte_level(std::string_view bytes);  // raw bytes -> vocabulary spelling
// Vocabulary spelling -> raw bytes. Characters outside the byte map stand for their own UTF-8 bytes
// (as HuggingFace's ByteLevel decoder does for tokens such as added specials).
std::string byte_level_to_bytes(std::string_view token);

class ByteLevelBPE {
 public:
  // `vocab`: (token in vocabulary spelling, id); `merges`: pairs in rank order (rank = index; when a
  // pair repeats, the later rank wins, as in GPT-2's dict and HuggingFace). `ignore_merges`: a piece
  // that is itself in the vocabulary becomes that token without merging (LLaMA-3). `source` names the
  // file(s) in errors. Throws Error for an id below 0 or used twice, a merge whose parts or result
  // are not in the vocabulary, or a byte without a token.
  // A spelling given twice is an error too (nlohmann::json keeps the last of duplicate keys; the
  // hand parser of vocab.json passes them all on).
  // threads > 1: the raw-bytes index is built on a second thread while this one builds the spelling
  // index and the merge table (the same tables either way).
  ByteLevelBPE(const std::vector<std::pair<std::string_view, int32_t>>& vocab,
               const std::vector<std::pair<std::string_view, std::string_view>>& merges, bool ignore_merges,
               const std::string& source, int threads = 1);
  ByteLevelBPE(const std::vector<std::pair<std::string, int32_t>>& vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
               const std::string& source);
  ~ByteLevelBPE();

  // Appends the ids of `text` split into pieces by `pattern` (raw bytes, any values). Thread-safe:
  // pieces already encoded by any thread come from a cache shared by all (lock-free, insert-only);
  // once that is full, each thread also keeps its own cache of recent pieces.
  void encode_text(PretokenizerPattern pattern, const uint8_t* text, size_t n, std::vector<int32_t>& out) const;
  // The same for a text taken as one piece (ByteLevel pre-tokenizer with use_regex = false).
  void encode_piece(const uint8_t* bytes, size_t n, std::vector<int32_t>& out) const;

  int64_t size() const { return static_cast<int64_t>(token_offset_.size()) - 1; }  // max id + 1
  bool has_id(int32_t id) const { return id >= 0 && id < size() && present_[id]; }
  // Raw bytes of token `id` (has_id(id) must hold).
  std::string_view token_bytes(int32_t id) const {
    return std::string_view(token_bytes_).substr(token_offset_[id], token_offset_[id + 1] - token_offset_[id]);
  }
  int32_t id_of(std::string_view vocab_spelling) const;  // -1 when absent
  int32_t id_of_bytes(std::string_view raw_bytes) const;  // -1 when absent

  // The merge algorithm alone on a symbol sequence (ids of bytes or tokens), in place; exposed so a
  // test can check the quadratic and the heap variants against each other.
  void merge_small(std::vector<int32_t>& symbols) const;
  void merge_large(std::vector<int32_t>& symbols) const;

  // The shared piece cache takes at most `max_entries` pieces (default kSharedCacheEntries; a test
  // makes it small to reach the per-thread fallback). Replaces the cache: call before any encode.
  static constexpr size_t kSharedCacheEntries = size_t{1} << 17;
  void set_shared_cache_capacity(size_t max_entries);
  size_t shared_cache_entries() const;  // pieces the shared cache holds or has handed to threads

 private:
  // The merge table from merges in rank order (needs the spelling index); part of construction.
  void build_merges(const std::vector<std::pair<std::string_view, std::string_view>>& merges, int32_t max_id,
                    const std::string& source);
  struct MergeTable;   // open-addressing hash map (id_a, id_b) -> (rank, merged id)
  struct StringIndex;  // open-addressing hash map string -> id, keys kept in one string
  struct WordCache;        // per thread, cleared when full
  struct SharedWordCache;  // shared by all threads, insert-only

  void encode_pieces(const PretokenizerPattern* pattern, const uint8_t* text, size_t n,
                     std::vector<int32_t>& out) const;
  void encode_uncached(const uint8_t* bytes, size_t n, std::vector<int32_t>& out) const;
  WordCache& thread_cache() const;
  std::string_view spelling(int32_t id) const {  // vocabulary spelling of id ("" when absent)
    const uint32_t b = spelling_offset_[id], e = spelling_offset_[id + 1];
    return std::string_view(spelling_text_).substr(b, e - b);
  }
  uint32_t pair_rank(int32_t a, int32_t b, int32_t* merged) const;

  std::string token_bytes_;              // raw bytes of all tokens, back to back
  std::vector<uint32_t> token_offset_;   // [size()+1] offsets into token_bytes_
  std::vector<uint8_t> present_;         // [size()] 1 where an id is used
  std::string spelling_text_;            // vocabulary spellings of all tokens, back to back
  std::vector<uint32_t> spelling_offset_;  // [size()+1] offsets into spelling_text_
  std::unique_ptr<StringIndex> spelling_to_id_;  // over spelling_text_
  std::unique_ptr<StringIndex> bytes_to_id_;     // over token_bytes_, byte-level tokens only
  std::array<int32_t, 256> byte_id_{};
  std::unique_ptr<MergeTable> merges_;
  bool ignore_merges_ = false;
  mutable std::unique_ptr<SharedWordCache> shared_cache_;  // filled by encode (thread-safe)
  uint64_t instance_id_ = 0;  // keys the per-thread caches (never reused, unlike addresses)
};

// ---- 3. GPT2BPETokenizer -------------------------------------------------------------------------

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
