#include "tokenizers/tokenizer_simple.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"

namespace megadlm {

namespace {
void remember(TokenizerSpec& spec, const std::string& token) {
  auto& list = spec.added_special_tokens;
  if (std::find(list.begin(), list.end(), token) == list.end()) list.push_back(token);
}

// A whole string as a non-negative decimal, or -1.
int64_t parse_id(std::string_view s) {
  int64_t v = -1;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty() || s[0] == '-' || s[0] == '+') return -1;
  return v;
}
}  // namespace

// ---- NullTokenizer ---------------------------------------------------------------------------------

NullTokenizer::NullTokenizer(const TokenizerSpec& spec) {
  spec_ = spec;
  spec_.added_special_tokens.clear();
  MEGADLM_CHECK(spec.null_vocab_size > 0 && spec.null_vocab_size < (int64_t{1} << 30),
                "NullTokenizer needs --vocab-size N with 0 < N < 2^30 (got ", spec.null_vocab_size, ")");
  base_ = spec.null_vocab_size;
  for (const std::string& t : spec.added_special_tokens) add_special_token(t);
}

void NullTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  // Megatron splits on single spaces; we accept any run of ASCII whitespace between ids.
  size_t i = 0;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    const std::string_view word = text.substr(i, j - i);
    const int64_t id = parse_id(word);
    MEGADLM_CHECK(id >= 0 && id < vocab_size(), "NullTokenizer: '", word, "' is not an id in [0, ", vocab_size(),
                  ") (the text must hold space-separated decimal ids)");
    out.push_back(static_cast<int32_t>(id));
    i = j;
  }
}

std::string NullTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    MEGADLM_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "NullTokenizer: cannot decode id ", ids[i],
                  " (vocabulary size ", vocab_size(), ")");
    if (i) out.push_back(' ');
    out += std::to_string(ids[i]);
  }
  return out;
}

int32_t NullTokenizer::token_to_id(std::string_view token) const {
  for (size_t i = 0; i < added_.size(); ++i)
    if (added_[i] == token) return static_cast<int32_t>(base_ + 1 + i);
  const int64_t id = parse_id(token);
  return id >= 0 && id < vocab_size() ? static_cast<int32_t>(id) : -1;
}

int32_t NullTokenizer::add_special_token(const std::string& token) {
  MEGADLM_CHECK(!token.empty(), "add_special_token: the token is empty");
  int32_t id = token_to_id(token);
  if (id < 0) {
    id = static_cast<int32_t>(vocab_size());
    added_.push_back(token);
  }
  remember(spec_, token);
  return id;
}

// ---- ByteTokenizer ---------------------------------------------------------------------------------

ByteTokenizer::ByteTokenizer(const TokenizerSpec& spec) {
  spec_ = spec;
  spec_.added_special_tokens.clear();
  for (const std::string& t : spec.added_special_tokens) add_special_token(t);
}

void ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const size_t base = out.size();
  out.resize(base + text.size());
  for (size_t i = 0; i < text.size(); ++i) out[base + i] = static_cast<unsigned char>(text[i]);
}

std::string ByteTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id >= 0 && id < 256) {
      out.push_back(static_cast<char>(id));
    } else {
      MEGADLM_CHECK(id >= 256 && id < vocab_size(), "ByteTokenizer: cannot decode id ", id, " (vocabulary size ",
                    vocab_size(), ")");
      out += specials_[id - 256];
    }
  }
  return out;
}

int32_t ByteTokenizer::token_to_id(std::string_view token) const {
  for (size_t i = 0; i < specials_.size(); ++i)
    if (specials_[i] == token) return static_cast<int32_t>(256 + i);
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  return -1;
}

int32_t ByteTokenizer::add_special_token(const std::string& token) {
  MEGADLM_CHECK(!token.empty(), "add_special_token: the token is empty");
  int32_t id = token_to_id(token);
  if (id < 0) {
    id = static_cast<int32_t>(vocab_size());
    specials_.push_back(token);
  }
  if (token != "<|endoftext|>") remember(spec_, token);
  return id;
}

}  // namespace megadlm
