#include "tokenizers/unicode.h"

#include <array>
#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

namespace megadlm::unicode {

namespace {

struct UnicodeRange {
  uint32_t first, last;
  CharClass cls;
};
struct CccRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct CodeRange {
  uint32_t first, last;
};
struct Decomposition {
  uint32_t cp;
  uint32_t to[4];  // zero-padded
};
struct Composition {
  uint32_t first, second, composite;
};

#include "tokenizers/unicode_tables.inc"

// Per code point: bits 0-1 the CharClass, bit 2 "NFC quick check is not Yes", bits 8-15 the canonical
// combining class.
constexpr uint16_t kQcNotYes = 4;

// A two-level lookup built once from the ranges: block[index[cp >> 8]][cp & 255]. Most of the 4352
// blocks of 256 code points are all alike (letters, unassigned), so few distinct blocks remain.
struct ClassTable {
  std::vector<uint16_t> index;
  std::vector<std::array<uint16_t, 256>> blocks;

  uint16_t get(uint32_t cp) const { return blocks[index[cp >> 8]][cp & 255]; }

  ClassTable() {
    constexpr uint32_t kBlocks = 0x110000 >> 8;
    std::vector<std::array<uint16_t, 256>> raw(kBlocks);
    for (auto& b : raw) b.fill(kOther);
    for (const UnicodeRange& r : kUnicodeRanges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) raw[cp >> 8][cp & 255] |= r.cls;
    for (const CodeRange& r : kNfcQcNotYes)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) raw[cp >> 8][cp & 255] |= kQcNotYes;
    for (const CccRange& r : kCccRanges)
      for (uint32_t cp = r.first; cp <= r.last; ++cp) raw[cp >> 8][cp & 255] |= uint16_t(r.ccc) << 8;
    std::map<std::array<uint16_t, 256>, uint16_t> seen;
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
  return static_cast<CharClass>(class_table().get(cp) & 3);
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

namespace {

// The length of the sequence lead byte b starts and the range its second byte must fall in (which
// excludes overlong forms, surrogates and code points above U+10FFFF); 0 when b cannot start one.
struct LeadByte {
  int length = 0;
  uint8_t lo = 0x80, hi = 0xBF;
};

LeadByte lead_byte(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {};
}

}  // namespace

std::string replace_invalid_utf8(std::string_view s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      out.push_back(static_cast<char>(p[i++]));
      continue;
    }
    const LeadByte lead = lead_byte(p[i]);
    size_t j = i + 1;  // end of the maximal subpart starting at i
    if (lead.length > 0 && j < n && p[j] >= lead.lo && p[j] <= lead.hi) {
      ++j;
      while (j < n && j - i < static_cast<size_t>(lead.length) && (p[j] & 0xC0) == 0x80) ++j;
    }
    if (j - i == static_cast<size_t>(lead.length)) out.append(s.substr(i, j - i));
    else out.append(kReplacement, 3);
    i = j;
  }
  return out;
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

// ---- NFC -------------------------------------------------------------------------------------------

namespace {

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An invalid byte b travels through NFC as the pseudo code point kByteBase + b (class 0, no mappings).
constexpr uint32_t kByteBase = 0x110000;

struct NfcMaps {
  std::unordered_map<uint32_t, const Decomposition*> decomposition;
  std::unordered_map<uint64_t, uint32_t> composition;
  NfcMaps() {
    for (const Decomposition& d : kDecompositions) decomposition.emplace(d.cp, &d);
    for (const Composition& c : kCompositions)
      composition.emplace((uint64_t(c.first) << 32) | c.second, c.composite);
  }
};

const NfcMaps& nfc_maps() {
  static const NfcMaps maps;
  return maps;
}

inline uint8_t ccc_of(uint32_t cp) { return cp < 0x300 || cp >= kByteBase ? 0 : class_table().get(cp) >> 8; }

uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& m = nfc_maps().composition;
  const auto it = m.find((uint64_t(a) << 32) | b);
  return it == m.end() ? 0 : it->second;
}

}  // namespace

bool is_nfc_quick(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  uint8_t last_ccc = 0;
  for (size_t i = 0; i < s.size();) {
    if (p[i] < 0x80) {  // ASCII: class 0, quick check Yes
      last_ccc = 0;
      ++i;
      continue;
    }
    uint32_t cp;
    i += decode_utf8(p + i, s.size() - i, &cp);
    if (cp == kInvalid) {
      last_ccc = 0;
      continue;
    }
    const uint16_t info = class_table().get(cp);
    const uint8_t ccc = info >> 8;
    if ((info & kQcNotYes) || (ccc != 0 && ccc < last_ccc)) return false;
    last_ccc = ccc;
  }
  return true;
}

void append_nfc(std::string_view s, std::string& out) {
  if (is_nfc_quick(s)) {
    out.append(s);
    return;
  }
  // 1. Full canonical decomposition.
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  const auto& dmap = nfc_maps().decomposition;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const int len = decode_utf8(p + i, s.size() - i, &cp);
    if (cp == kInvalid) cp = kByteBase + p[i];
    i += len;
    if (cp >= kSBase && cp < kSBase + kSCount) {
      const uint32_t k = cp - kSBase;
      cps.push_back(kLBase + k / kNCount);
      cps.push_back(kVBase + (k % kNCount) / kTCount);
      if (k % kTCount) cps.push_back(kTBase + k % kTCount);
      continue;
    }
    const auto it = cp >= 0xC0 ? dmap.find(cp) : dmap.end();
    if (it == dmap.end()) {
      cps.push_back(cp);
    } else {
      for (uint32_t c : it->second->to)
        if (c) cps.push_back(c);
    }
  }
  // 2. Canonical ordering: each run of non-starters sorted by class, stably.
  for (size_t i = 0; i < cps.size();) {
    if (ccc_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc_of(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // 3. Canonical composition: a character joins the last starter unless a character between them has
  //    class 0 or a class >= its own (it is "blocked").
  std::vector<uint32_t> res;
  res.reserve(cps.size());
  int64_t starter = -1;
  uint8_t last_ccc = 0;
  for (uint32_t c : cps) {
    const uint8_t cc = ccc_of(c);
    if (starter >= 0) {
      const bool adjacent = static_cast<int64_t>(res.size()) - 1 == starter;
      if (adjacent || (last_ccc != 0 && last_ccc < cc)) {
        if (const uint32_t comp = compose(res[starter], c)) {
          res[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<int64_t>(res.size());
    last_ccc = cc;
    res.push_back(c);
  }
  for (uint32_t c : res) {
    if (c >= kByteBase) {
      out.push_back(static_cast<char>(c - kByteBase));
    } else {
      append_utf8(c, out);
    }
  }
}

}  // namespace megadlm::unicode
