#include "data/unicode.h"

#include <array>
#include <map>
#include <vector>

namespace megadlm::unicode {

namespace {

struct UnicodeRange {
  uint32_t first, last;
  CharClass cls;
};

#include "data/unicode_tables.inc"

// A two-level lookup built once from the ranges: block[index[cp >> 8]][cp & 255]. Most of the 4352
// blocks of 256 code points are all-letter or all-other, so few distinct blocks remain (~100 KB).
struct ClassTable {
  std::vector<uint16_t> index;
  std::vector<std::array<uint8_t, 256>> blocks;

  ClassTable() {
    constexpr uint32_t kBlocks = 0x110000 >> 8;
    std::vector<std::array<uint8_t, 256>> raw(kBlocks);
    for (auto& b : raw) b.fill(kOther);
    for (const UnicodeRange& r : kUnicodeRanges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) raw[cp >> 8][cp & 255] = r.cls;
    std::map<std::array<uint8_t, 256>, uint16_t> seen;
    index.resize(kBlocks);
    for (uint32_t b = 0; b < kBlocks; ++b) {
      auto [it, inserted] = seen.emplace(raw[b], static_cast<uint16_t>(blocks.size()));
      if (inserted) blocks.push_back(raw[b]);
      index[b] = it->second;
    }
  }
};

const ClassTable& class_table() {
  static const ClassTable table;
  return table;
}

}  // namespace

namespace detail {

// ASCII from the same definitions: letters A-Z a-z, numbers 0-9, whitespace \t \n \v \f \r and space.
const uint8_t kAsciiClass[128] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 0, 0,  // 0x00
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // 0x10
    3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // 0x20 space ! " # ...
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0,  // 0x30 0-9
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  // 0x40 @ A-O
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,  // 0x50 P-Z
    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  // 0x60 ` a-o
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,  // 0x70 p-z
};

CharClass char_class_slow(uint32_t cp) {
  if (cp > 0x10FFFF) return kOther;
  const ClassTable& t = class_table();
  return static_cast<CharClass>(t.blocks[t.index[cp >> 8]][cp & 255]);
}

int decode_utf8_multibyte(const uint8_t* s, size_t n, uint32_t* cp) {
  const uint8_t c = s[0];
  // Lead byte: the sequence length and the allowed range of the second byte (which excludes
  // overlong forms, surrogates and code points above U+10FFFF; see the Unicode standard, table 3-7).
  int len;
  uint8_t lo = 0x80, hi = 0xBF;
  uint32_t v;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *cp = kInvalid;  // a continuation byte, C0/C1 (overlong) or F5..FF
    return 1;
  }
  if (n < static_cast<size_t>(len) || s[1] < lo || s[1] > hi) {
    *cp = kInvalid;
    return 1;
  }
  v = (v << 6) | (s[1] & 0x3F);
  for (int k = 2; k < len; ++k) {
    if ((s[k] & 0xC0) != 0x80) {
      *cp = kInvalid;
      return 1;
    }
    v = (v << 6) | (s[k] & 0x3F);
  }
  *cp = v;
  return len;
}

}  // namespace detail

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    const int len = decode_utf8(p + i, s.size() - i, &cp);
    if (cp == kInvalid) return false;
    i += len;
  }
  return true;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

const char* table_version() { return kUnicodeVersion; }

}  // namespace megadlm::unicode
