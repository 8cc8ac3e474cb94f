// The hand-written split regexes of the pre-tokenizer (GPT-2, LLaMA-3, Qwen2).
#include "tokenizers/pretokenizer.h"

#include "core/error.h"
#include "tokenizers/unicode.h"

namespace megadlm {

using unicode::CharClass;
using unicode::kLetter;
using unicode::kNumber;
using unicode::kOther;
using unicode::kSpace;

const char* const kPretokenizerRegex[3] = {
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

PretokenizerPattern pattern_from_regex(const std::string& regex, const std::string& where) {
  for (int p = 0; p < 3; ++p)
    if (regex == kPretokenizerRegex[p]) return static_cast<PretokenizerPattern>(p);
  fail(where, ": the split regex ", regex,
       " is not supported (known: the GPT-2, LLaMA-3 and Qwen2 pre-tokenizer patterns)");
}

namespace {

// One character: its code point class and length in bytes (invalid bytes: kOther, 1 byte).
struct Ch {
  CharClass cls;
  uint32_t len;
};

inline Ch peek(const uint8_t* s, size_t n, size_t i) {
  const uint8_t c = s[i];
  if (c < 0x80) return {static_cast<CharClass>(unicode::detail::kAsciiClass[c]), 1};
  uint32_t cp;
  const int len = unicode::detail::decode_utf8_multibyte(s + i, n - i, &cp);
  return {unicode::char_class(cp), static_cast<uint32_t>(len)};
}

// End of the run of characters of class `cls` that continues at i.
inline size_t run_end(const uint8_t* s, size_t n, size_t i, CharClass cls) {
  while (i < n) {
    const Ch c = peek(s, n, i);
    if (c.cls != cls) break;
    i += c.len;
  }
  return i;
}

// \s+(?!\S)|\s+ at a whitespace character i: the whole run when it ends the text or is one character
// long; otherwise the run less its last character (which then starts the next piece, so that " word"
// keeps its space).
inline size_t space_run_end(const uint8_t* s, size_t n, size_t i) {
  size_t last = i, j = i;
  while (j < n) {
    const Ch c = peek(s, n, j);
    if (c.cls != kSpace) break;
    last = j;
    j += c.len;
  }
  return (j == n || last == i) ? j : last;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t gpt2_next(const uint8_t* s, size_t n, size_t i) {
  const uint8_t c = s[i];
  if (c == '\'' && i + 1 < n) {
    const uint8_t a = s[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const uint8_t b = s[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  Ch first = peek(s, n, i);
  size_t j = i;
  if (c == ' ' && i + 1 < n) {  // the optional leading space of the three run alternatives
    const Ch next = peek(s, n, i + 1);
    if (next.cls != kSpace) j = i + 1, first = next;
  }
  if (first.cls != kSpace) return run_end(s, n, j + first.len, first.cls);
  return space_run_end(s, n, i);
}

inline uint8_t ascii_lower(uint8_t x) { return (x >= 'A' && x <= 'Z') ? static_cast<uint8_t>(x + 32) : x; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
size_t llama3_next(const uint8_t* s, size_t n, size_t i, int max_digits) {
  const uint8_t c = s[i];
  if (c == '\'' && i + 1 < n) {
    const uint8_t a = ascii_lower(s[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    // Oniguruma's case folding also matches U+017F LATIN SMALL LETTER LONG S (C5 BF) for 's'.
    if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3;
    if (i + 2 < n) {
      const uint8_t b = ascii_lower(s[i + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  const Ch first = peek(s, n, i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (first.cls == kLetter) return run_end(s, n, i + first.len, kLetter);
  if (first.cls != kNumber && c != '\r' && c != '\n' && i + first.len < n) {
    const Ch next = peek(s, n, i + first.len);
    if (next.cls == kLetter) return run_end(s, n, i + first.len + next.len, kLetter);
  }
  // \p{N}{1,max_digits}
  if (first.cls == kNumber) {
    size_t j = i + first.len;
    for (int k = 1; k < max_digits && j < n; ++k) {
      const Ch d = peek(s, n, j);
      if (d.cls != kNumber) break;
      j += d.len;
    }
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t j = i;
  Ch f = first;
  if (c == ' ' && i + 1 < n) {
    const Ch next = peek(s, n, i + 1);
    if (next.cls == kOther) j = i + 1, f = next;
  }
  if (f.cls == kOther) {
    size_t e = run_end(s, n, j + f.len, kOther);
    while (e < n && (s[e] == '\r' || s[e] == '\n')) ++e;
    return e;
  }
  // \s*[\r\n]+: the whitespace run up to and including its last \r or \n; else \s+(?!\S)|\s+.
  size_t nl_end = 0, last = i, k = i;
  while (k < n) {
    const Ch w = peek(s, n, k);
    if (w.cls != kSpace) break;
    if (s[k] == '\r' || s[k] == '\n') nl_end = k + 1;
    last = k;
    k += w.len;
  }
  if (nl_end) return nl_end;
  return (k == n || last == i) ? k : last;
}

}  // namespace

size_t next_piece(PretokenizerPattern pattern, const uint8_t* text, size_t n, size_t pos) {
  switch (pattern) {
    case PretokenizerPattern::Gpt2: return gpt2_next(text, n, pos);
    case PretokenizerPattern::Llama3: return llama3_next(text, n, pos, 3);
    case PretokenizerPattern::Qwen2: return llama3_next(text, n, pos, 1);
  }
  return n;
}

std::vector<std::pair<size_t, size_t>> split_pieces(PretokenizerPattern pattern, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t e = next_piece(pattern, s, text.size(), i);
    out.emplace_back(i, e);
    i = e;
  }
  return out;
}

}  // namespace megadlm
