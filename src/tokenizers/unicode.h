#pragma once
// UTF-8 decoding and validation, the three Unicode character classes the BPE pre-tokenizer regexes
// test: \p{L} (letters), \p{N} (numbers) and \s (whitespace), and NFC normalization (the normalizer of
// GPT-NeoX and Qwen2 tokenizer.json files). The tables are generated from Unicode 16.0 (the version of
// Oniguruma inside HuggingFace `tokenizers`, whose ids we match) by
// tools/reference/gen_unicode_tables.py into unicode_tables.inc.
//
// Invalid UTF-8: a byte that does not start a complete, shortest-form, non-surrogate sequence of at
// most U+10FFFF stands alone as one "character" of class Other (never a letter, number or space).
// Byte-level BPE then still encodes it (every byte has a token) and decoding gives it back unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace megadlm::unicode {

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// The code point decode_utf8 reports for a byte that is not valid UTF-8 (its class is kOther).
inline constexpr uint32_t kInvalid = 0xFFFFFFFFu;

namespace detail {
extern const uint8_t kAsciiClass[128];
CharClass char_class_slow(uint32_t cp);  // cp >= 128
int decode_utf8_multibyte(const uint8_t* s, size_t n, uint32_t* cp);
}  // namespace detail

// Class of a code point; kOther for kInvalid and anything above U+10FFFF.
inline CharClass char_class(uint32_t cp) {
  return cp < 128 ? static_cast<CharClass>(detail::kAsciiClass[cp]) : detail::char_class_slow(cp);
}

// Decodes the character at s[0] (n >= 1 bytes available): returns its length in bytes (1..4) and sets
// *cp; an invalid or truncated sequence gives length 1 and *cp = kInvalid.
inline int decode_utf8(const uint8_t* s, size_t n, uint32_t* cp) {
  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  }
  return detail::decode_utf8_multibyte(s, n, cp);
}

bool is_valid_utf8(std::string_view s);

// s with every maximal subpart of an ill-formed UTF-8 sequence replaced by one U+FFFD (Unicode's
// "substitution of maximal subparts", what Python's bytes.decode('utf-8', 'replace') and Rust's
// String::from_utf8_lossy, hence HuggingFace's decode, produce): a lead byte and the continuation
// bytes that could still complete it count as one, any other invalid byte as one. Valid UTF-8 comes
// back unchanged. For text that must be valid UTF-8 (JSON output) from bytes that may not be (a
// byte-level BPE sample cut inside a character).
std::string replace_invalid_utf8(std::string_view s);

// NFC (canonical decomposition, canonical ordering, canonical composition; UAX #15). Invalid bytes pass
// through unchanged and never combine.
bool is_nfc_quick(std::string_view s);  // true when the quick check proves s is already NFC
void append_nfc(std::string_view s, std::string& out);
inline std::string to_nfc(std::string_view s) {
  std::string out;
  append_nfc(s, out);
  return out;
}
void append_utf8(uint32_t cp, std::string& out);  // cp must be a scalar value (no surrogates)
const char* table_version();                      // Unicode version of the class tables

}  // namespace megadlm::unicode
