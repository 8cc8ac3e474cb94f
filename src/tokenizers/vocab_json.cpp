#include "tokenizers/vocab_json.h"

#include <limits>

#include "tokenizers/unicode.h"

namespace megadlm {

namespace {

inline bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Four hex digits at s[i..i+4); -1 when they are not.
inline int32_t hex4(std::string_view s, size_t i) {
  if (i + 4 > s.size()) return -1;
  int32_t v = 0;
  for (size_t k = 0; k < 4; ++k) {
    const int d = hex_value(s[i + k]);
    if (d < 0) return -1;
    v = (v << 4) | d;
  }
  return v;
}

// Writes the UTF-8 of a scalar value at w; returns the end.
inline char* put_utf8(uint32_t cp, char* w) {
  if (cp < 0x80) {
    *w++ = static_cast<char>(cp);
  } else if (cp < 0x800) {
    *w++ = static_cast<char>(0xC0 | (cp >> 6));
    *w++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *w++ = static_cast<char>(0xE0 | (cp >> 12));
    *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *w++ = static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *w++ = static_cast<char>(0xF0 | (cp >> 18));
    *w++ = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *w++ = static_cast<char>(0x80 | (cp & 0x3F));
  }
  return w;
}

// Scans the string whose opening quote is at s[i-1]; on success sets *key, *i past the closing quote.
// Escaped keys are decoded at *w (advanced): the output is never longer than the escaped input (\n:
// 2 -> 1 bytes, \uXXXX: 6 -> at most 3, a surrogate pair: 12 -> 4), so storage of text.size() bytes
// always suffices.
bool scan_string(std::string_view s, size_t* i, char** w, std::string_view* key) {
  const size_t begin = *i;
  size_t j = begin;
  // The common case: no escapes, so the key is a view into the text.
  for (; j < s.size(); ++j) {
    const auto c = static_cast<uint8_t>(s[j]);
    if (c == '"') {
      *key = s.substr(begin, j - begin);
      *i = j + 1;
      return true;
    }
    if (c == '\\') break;
    if (c < 0x20) return false;  // control characters must be escaped
    if (c >= 0x80) {
      uint32_t cp;
      const int len = unicode::decode_utf8(reinterpret_cast<const uint8_t*>(s.data()) + j, s.size() - j, &cp);
      if (cp == unicode::kInvalid) return false;
      j += len - 1;
    }
  }
  if (j >= s.size()) return false;  // unterminated
  // Escapes: copy what was scanned, then decode the rest.
  char* const out = *w;
  char* o = out;
  for (size_t k = begin; k < j; ++k) *o++ = s[k];
  while (j < s.size()) {
    const auto c = static_cast<uint8_t>(s[j]);
    if (c == '"') {
      *key = std::string_view(out, static_cast<size_t>(o - out));
      *w = o;
      *i = j + 1;
      return true;
    }
    if (c < 0x20) return false;
    if (c >= 0x80) {
      uint32_t cp;
      const int len = unicode::decode_utf8(reinterpret_cast<const uint8_t*>(s.data()) + j, s.size() - j, &cp);
      if (cp == unicode::kInvalid) return false;
      for (int k = 0; k < len; ++k) *o++ = s[j + k];
      j += len;
      continue;
    }
    if (c != '\\') {
      *o++ = static_cast<char>(c);
      ++j;
      continue;
    }
    if (j + 1 >= s.size()) return false;
    const char e = s[j + 1];
    j += 2;
    switch (e) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        int32_t cp = hex4(s, j);
        if (cp < 0) return false;
        j += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a low surrogate alone
        if (cp >= 0xD800 && cp <= 0xDBFF) {             // needs its low half next
          if (j + 2 > s.size() || s[j] != '\\' || s[j + 1] != 'u') return false;
          const int32_t lo = hex4(s, j + 2);
          if (lo < 0xDC00 || lo > 0xDFFF) return false;
          j += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        o = put_utf8(static_cast<uint32_t>(cp), o);
        break;
      }
      default: return false;
    }
  }
  return false;  // unterminated
}

// -?(0|[1-9][0-9]*) as int32, followed by neither fraction nor exponent.
bool scan_int(std::string_view s, size_t* i, int32_t* value) {
  size_t j = *i;
  const bool neg = j < s.size() && s[j] == '-';
  if (neg) ++j;
  if (j >= s.size() || s[j] < '0' || s[j] > '9') return false;
  if (s[j] == '0' && j + 1 < s.size() && s[j + 1] >= '0' && s[j + 1] <= '9') return false;  // leading zero
  int64_t v = 0;
  const size_t first = j;
  for (; j < s.size() && s[j] >= '0' && s[j] <= '9'; ++j) {
    if (j - first >= 10) return false;  // beyond int32 in any case
    v = v * 10 + (s[j] - '0');
  }
  if (j < s.size() && (s[j] == '.' || s[j] == 'e' || s[j] == 'E')) return false;  // a float
  if (neg) v = -v;
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) return false;
  *value = static_cast<int32_t>(v);
  *i = j;
  return true;
}

}  // namespace

bool parse_flat_vocab_json(std::string_view s, std::vector<std::pair<std::string_view, int32_t>>& out,
                           std::string& storage) {
  storage.assign(s.size(), '\0');
  char* w = storage.data();
  // GPT-2's vocab.json spends ~20 bytes per entry; reserving avoids regrowing the vector.
  out.reserve(out.size() + s.size() / 16 + 1);
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size() && is_json_space(s[i])) ++i;
  };
  skip_space();
  if (i >= s.size() || s[i] != '{') return false;
  ++i;
  skip_space();
  if (i < s.size() && s[i] == '}') {
    ++i;
  } else {
    for (;;) {
      if (i >= s.size() || s[i] != '"') return false;
      ++i;
      std::string_view key;
      if (!scan_string(s, &i, &w, &key)) return false;
      skip_space();
      if (i >= s.size() || s[i] != ':') return false;
      ++i;
      skip_space();
      int32_t id;
      if (!scan_int(s, &i, &id)) return false;
      out.emplace_back(key, id);
      skip_space();
      if (i >= s.size()) return false;
      if (s[i] == '}') {
        ++i;
        break;
      }
      if (s[i] != ',') return false;
      ++i;
      skip_space();
    }
  }
  skip_space();
  return i == s.size();
}

}  // namespace megadlm
