#include "tokenizers/wordpiece.h"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/error.h"
#include "tokenizers/bpe_merges.h"
#include "tokenizers/unicode.h"

namespace megadlm {

namespace {

struct CodeRange {
  uint32_t first, last;
};
struct UncasedEntry {
  uint32_t cp;
  uint32_t offset;  // into kBertUncasedTo
  uint32_t length;  // 0: the character is dropped
};

#include "tokenizers/bert_tables.inc"

constexpr uint32_t kReplacement = 0xFFFD;
constexpr size_t kMaxWordChars = 100;  // `tokenizers`' max_input_chars_per_word
constexpr std::string_view kPrefix = "##";

enum : uint8_t { kDrop = 1, kSpace = 2, kPunct = 4, kCjk = 8 };

// One byte of flags per code point, built once from the ranges (1.1 MB; a lookup is one load).
class BertClasses {
 public:
  static const BertClasses& get() {
    static const BertClasses classes;
    return classes;
  }
  uint8_t operator()(uint32_t cp) const { return cp < flags_.size() ? flags_[cp] : 0; }

 private:
  BertClasses() : flags_(0x110000, 0) {
    mark(kBertDrop, kDrop);
    mark(kBertSpace, kSpace);
    mark(kBertPunct, kPunct);
    mark(kBertCjk, kCjk);
  }
  template <size_t N>
  void mark(const CodeRange (&ranges)[N], uint8_t flag) {
    for (const CodeRange& r : ranges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) flags_[cp] |= flag;
  }
  std::vector<uint8_t> flags_;
};

// Appends what strip_accents then lowercase make of `cp`: a Hangul syllable decomposes into its
// jamo (NFD's algorithm), a character of the table into its entry, anything else stays.
void append_uncased(uint32_t cp, std::string& out) {
  constexpr uint32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;
  if (cp >= kHangulFirst && cp <= kHangulLast) {
    const uint32_t s = cp - kHangulFirst;
    unicode::append_utf8(0x1100 + s / 588, out);
    unicode::append_utf8(0x1161 + (s % 588) / 28, out);
    if (s % 28 != 0) unicode::append_utf8(0x11A7 + s % 28, out);
    return;
  }
  const auto* end = std::end(kBertUncased);
  const auto* it = std::lower_bound(std::begin(kBertUncased), end, cp,
                                    [](const UncasedEntry& e, uint32_t c) { return e.cp < c; });
  if (it == end || it->cp != cp) {
    unicode::append_utf8(cp, out);
    return;
  }
  for (uint32_t i = 0; i < it->length; ++i) unicode::append_utf8(kBertUncasedTo[it->offset + i], out);
}

// Number of UTF-8 characters in s (s is valid UTF-8: it comes out of the normalizer).
size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// `tokenizers`' WordPiece decoder cleanup, applied to each token with its leading space.
void cleanup(std::string& token) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},       {" !", "!"},      {" ,", ","},          {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"},     {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) {
    size_t pos = 0;
    while ((pos = token.find(from, pos)) != std::string::npos) {
      token.replace(pos, from.size(), to);
      pos += to.size();
    }
  }
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(const TokenizerSpec& spec) {
  MEGADLM_CHECK(spec.type == "BertWordPieceLowerCase" || spec.type == "BertWordPieceCase",
                "WordPieceTokenizer: tokenizer type '", spec.type, "' is not BertWordPieceLowerCase or BertWordPieceCase");
  MEGADLM_CHECK(!spec.vocab_file.empty(), spec.type, " needs --vocab-file (a BERT vocab.txt)");
  lower_case_ = spec.type == "BertWordPieceLowerCase";
  spec_ = spec;
  spec_.added_special_tokens.clear();
  load_vocab(spec.vocab_file);
  for (const std::string& t : spec.added_special_tokens) add_special_token(t);
}

// vocab.txt: one token per line, trailing whitespace trimmed (as `tokenizers` reads it); every line
// must hold a distinct token, and the file must be UTF-8.
void WordPieceTokenizer::load_vocab(const std::string& path) {
  const std::string text = read_tokenizer_file(path, "--vocab-file");
  MEGADLM_CHECK(!text.empty(), "--vocab-file '", path, "' is empty (expected a BERT vocab.txt, one token per line)");
  size_t start = 0;
  for (size_t line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view token(text.data() + start, end - start);
    start = end + 1;
    while (!token.empty() && is_ascii_space(token.back())) token.remove_suffix(1);
    MEGADLM_CHECK(!token.empty(), "--vocab-file '", path, "' line ", line, " is empty (every line must hold a token)");
    MEGADLM_CHECK(unicode::is_valid_utf8(token), "--vocab-file '", path, "' line ", line, " is not valid UTF-8");
    const auto [it, inserted] = ids_.emplace(std::string(token), static_cast<int32_t>(tokens_.size()));
    MEGADLM_CHECK(inserted, "--vocab-file '", path, "' line ", line, ": token '", token, "' repeats line ", it->second + 1);
    tokens_.emplace_back(token);
    max_token_bytes_ = std::max(max_token_bytes_, token.size());
  }
  unk_ = required_token("[UNK]", path);
  sep_ = required_token("[SEP]", path);
  cls_ = required_token("[CLS]", path);
  pad_ = required_token("[PAD]", path);
  mask_ = required_token("[MASK]", path);
  for (const int32_t id : {pad_, unk_, cls_, sep_, mask_}) add_special_id(id);
}

void WordPieceTokenizer::add_special_id(int32_t id) {
  if (std::find(specials_.begin(), specials_.end(), id) != specials_.end()) return;
  specials_.push_back(id);
  special_first_byte_[static_cast<unsigned char>(tokens_[static_cast<size_t>(id)][0])] = true;
}

int32_t WordPieceTokenizer::required_token(const char* name, const std::string& path) const {
  const int32_t id = token_to_id(name);
  MEGADLM_CHECK(id >= 0, "--vocab-file '", path, "' has no ", name, " token (a BERT vocab.txt holds [PAD] [UNK] [CLS] [SEP] [MASK])");
  return id;
}

int32_t WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

int32_t WordPieceTokenizer::add_special_token(const std::string& token) {
  MEGADLM_CHECK(!token.empty(), "add_special_token: the token is empty");
  if (const int32_t id = token_to_id(token); id >= 0) {
    add_special_id(id);
    return id;
  }
  const auto id = static_cast<int32_t>(tokens_.size());
  ids_.emplace(token, id);
  tokens_.push_back(token);
  add_special_id(id);
  spec_.added_special_tokens.push_back(token);
  return id;
}

std::string bert_normalize(std::string_view text, bool lower_case) {
  const BertClasses& classes = BertClasses::get();
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    i += unicode::decode_utf8(p + i, text.size() - i, &cp);
    const uint8_t f = classes(cp == unicode::kInvalid ? kReplacement : cp);  // the drop class holds U+FFFD
    if (f & kDrop) continue;
    if (f & kSpace) {
      out += ' ';
      continue;
    }
    if (f & kCjk) out += ' ';
    if (lower_case) {
      append_uncased(cp, out);
    } else {
      unicode::append_utf8(cp, out);
    }
    if (f & kCjk) out += ' ';
  }
  return out;
}

void bert_split_words(std::string_view normalized, const std::function<void(std::string_view)>& word_fn) {
  const BertClasses& classes = BertClasses::get();
  const auto* p = reinterpret_cast<const uint8_t*>(normalized.data());
  auto emit = [&](size_t from, size_t to) {
    if (to > from) word_fn(normalized.substr(from, to - from));
  };
  size_t word = 0;
  for (size_t i = 0; i < normalized.size();) {
    uint32_t cp = 0;
    const auto len = static_cast<size_t>(unicode::decode_utf8(p + i, normalized.size() - i, &cp));
    const uint8_t f = classes(cp);
    if (f & (kSpace | kPunct)) {
      emit(word, i);
      if (f & kPunct) emit(i, i + len);
      word = i + len;
    }
    i += len;
  }
  emit(word, normalized.size());
}

size_t WordPieceTokenizer::special_at(std::string_view text, size_t pos, int32_t* id) const {
  if (!special_first_byte_[static_cast<unsigned char>(text[pos])]) return 0;
  size_t best = 0;
  for (const int32_t s : specials_) {
    const std::string& t = tokens_[static_cast<size_t>(s)];
    if (t.size() > best && text.compare(pos, t.size(), t) == 0) {
      best = t.size();
      *id = s;
    }
  }
  return best;
}

void WordPieceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t id = -1;
    const size_t len = special_at(text, pos, &id);
    if (len == 0) {
      ++pos;
      continue;
    }
    encode_segment(text.substr(segment, pos - segment), out);
    out.push_back(id);
    pos += len;
    segment = pos;
  }
  encode_segment(text.substr(segment), out);
}

void WordPieceTokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  bert_split_words(bert_normalize(text, lower_case_), [&](std::string_view word) { encode_word(word, out); });
}

// Greedy longest-match-first: at each position the longest vocabulary token ("##" + piece after
// the first) that the word continues with; a position no token matches makes the whole word [UNK].
void WordPieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (count_chars(word) > kMaxWordChars) {
    out.push_back(unk_);
    return;
  }
  const size_t first_out = out.size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    const std::string_view prefix = start > 0 ? kPrefix : std::string_view();
    size_t end = std::min(word.size(), start + max_token_bytes_ - std::min(max_token_bytes_, prefix.size()));
    int32_t id = -1;
    for (; end > start; --end) {
      if (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) continue;  // inside a character
      piece.assign(prefix);
      piece.append(word.substr(start, end - start));
      id = token_to_id(piece);
      if (id >= 0) break;
    }
    if (id < 0) {
      out.resize(first_out);
      out.push_back(unk_);
      return;
    }
    out.push_back(id);
    start = end;
  }
}

std::string WordPieceTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string text;
  std::string token;
  for (size_t i = 0; i < n; ++i) {
    MEGADLM_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "decode: id ", ids[i], " is outside the vocabulary (size ",
                  vocab_size(), ")");
    const std::string& t = tokens_[static_cast<size_t>(ids[i])];
    if (i == 0) {
      token = t;
    } else if (t.compare(0, kPrefix.size(), kPrefix) == 0) {
      token = t.substr(kPrefix.size());
    } else {
      token = " " + t;
    }
    cleanup(token);
    text += token;
  }
  return text;
}

// ==== training ======================================================================================

void WordPieceTrainer::add_text(std::string_view text) {
  bert_split_words(bert_normalize(text, lower_case_), [&](std::string_view word) { ++counts_[std::string(word)]; });
}

namespace {

// The code points of a word (valid UTF-8: it comes out of the normalizer).
std::vector<uint32_t> code_points(std::string_view word) {
  std::vector<uint32_t> out;
  const auto* p = reinterpret_cast<const uint8_t*>(word.data());
  for (size_t i = 0; i < word.size();) {
    uint32_t cp = 0;
    i += static_cast<size_t>(unicode::decode_utf8(p + i, word.size() - i, &cp));
    out.push_back(cp);
  }
  return out;
}

// The `limit` most frequent characters (ties to the smaller code point), in code-point order.
std::vector<uint32_t> alphabet_of(const std::unordered_map<std::string, int64_t>& counts, int64_t limit) {
  std::unordered_map<uint32_t, int64_t> freq;
  for (const auto& [word, c] : counts)
    for (uint32_t cp : code_points(word)) freq[cp] += c;
  std::vector<std::pair<uint32_t, int64_t>> chars(freq.begin(), freq.end());
  std::sort(chars.begin(), chars.end(),
            [](const auto& x, const auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
  if (static_cast<int64_t>(chars.size()) > limit) chars.resize(static_cast<size_t>(limit));
  std::vector<uint32_t> out;
  for (const auto& [cp, c] : chars) out.push_back(cp);
  std::sort(out.begin(), out.end());
  return out;
}

std::string utf8_of(uint32_t cp) {
  std::string s;
  unicode::append_utf8(cp, s);
  return s;
}

}  // namespace

std::vector<std::string> WordPieceTrainer::train(const WordPieceTrainerOptions& opt) const {
  MEGADLM_CHECK(opt.min_frequency >= 0, "WordPiece training: --min-frequency must be >= 0 (got ", opt.min_frequency, ")");
  MEGADLM_CHECK(opt.limit_alphabet >= 1, "WordPiece training: the alphabet limit must be >= 1 (got ", opt.limit_alphabet, ")");
  std::vector<std::string> spelling;
  std::unordered_map<std::string, int32_t> id_of;
  auto add_token = [&](const std::string& s) {
    const auto [it, inserted] = id_of.emplace(s, static_cast<int32_t>(spelling.size()));
    if (inserted) spelling.push_back(s);
    return it->second;
  };
  for (const std::string& t : opt.special_tokens) {
    MEGADLM_CHECK(!t.empty() && t.find_first_of(" \t\r\n") == std::string::npos,
                  "WordPiece training: special token '", t, "' is empty or holds whitespace (vocab.txt has one per line)");
    add_token(t);
  }
  const std::vector<uint32_t> alphabet = alphabet_of(counts_, opt.limit_alphabet);
  MEGADLM_CHECK(opt.vocab_size >= static_cast<int64_t>(id_of.size() + alphabet.size()), "--vocab-size ", opt.vocab_size,
                " leaves no room for the alphabet: it must be at least ", id_of.size(), " special tokens + ",
                alphabet.size(), " characters");
  std::unordered_map<uint32_t, int32_t> first_id, next_id;  // character -> its token, first / "##" form
  for (uint32_t cp : alphabet) first_id[cp] = add_token(utf8_of(cp));

  // Words as symbol sequences; characters outside the alphabet are left out, as `tokenizers` does.
  std::vector<std::vector<uint32_t>> chars;
  std::vector<int64_t> count;
  std::vector<uint32_t> continuing;
  for (const auto& [word, c] : counts_) {
    std::vector<uint32_t> w;
    for (uint32_t cp : code_points(word))
      if (first_id.count(cp)) w.push_back(cp);
    for (size_t i = 1; i < w.size(); ++i) continuing.push_back(w[i]);
    chars.push_back(std::move(w));
    count.push_back(c);
  }
  std::sort(continuing.begin(), continuing.end());
  continuing.erase(std::unique(continuing.begin(), continuing.end()), continuing.end());
  for (uint32_t cp : continuing) next_id[cp] = add_token(std::string(kPrefix) + utf8_of(cp));
  std::vector<std::vector<int32_t>> words;
  words.reserve(chars.size());
  for (const auto& w : chars) {
    std::vector<int32_t> ids(w.size());
    for (size_t i = 0; i < w.size(); ++i) ids[i] = i == 0 ? first_id[w[i]] : next_id[w[i]];
    words.push_back(std::move(ids));
  }

  const auto full = [&] { return static_cast<int64_t>(id_of.size()) >= opt.vocab_size; };
  const auto merge = [&](int32_t a, int32_t b) {
    const std::string& tail = spelling[static_cast<size_t>(b)];
    const bool continues = tail.compare(0, kPrefix.size(), kPrefix) == 0;
    return add_token(spelling[static_cast<size_t>(a)] + (continues ? tail.substr(kPrefix.size()) : tail));
  };
  run_bpe_merges(words, count, opt.min_frequency, full, merge);
  return spelling;
}

}  // namespace megadlm
