#pragma once
// Byte-level BPE as GPT-2 defined it: each piece of the pre-tokenizer (pretokenizer.h) is taken as
// bytes, every byte is a base token, and the merge list (pairs of tokens, by rank) is applied lowest
// rank first until no pair of neighbours merges. GPT2BPETokenizer (gpt2_bpe_tokenizer.h) and the
// HuggingFace tokenizer.json loader (tokenizer_hf.h) are built on it.
//
// Any bytes can be encoded: a byte that is not valid UTF-8 is a character of its own for the
// pre-tokenizer, byte-level BPE encodes it like any byte, and decode(encode(x)) == x for every byte
// string x.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizers/pretokenizer.h"

namespace megadlm {

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

}  // namespace megadlm
