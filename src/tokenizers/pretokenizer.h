#pragma once
// The pre-tokenizer of byte-level BPE: a regex splits text into pieces ("words"), which the byte-level
// model (byte_level_bpe.h) then encodes one by one. We match the few regexes that real tokenizers use
// by hand (std::regex has no \p{L} and is slow).
//
// Any bytes can be split: the regexes run on code points, and a byte that is not valid UTF-8 counts
// as one character of its own that is neither letter, number nor space (see unicode.h).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace megadlm {

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

}  // namespace megadlm
