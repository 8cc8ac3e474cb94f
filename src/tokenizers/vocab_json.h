#pragma once
// vocab.json (GPT-2's {"token": id, ...}) parsed by hand. A generic JSON DOM spends about ten times as
// long on GPT-2's 50k entries (a map node and a string per entry); this scanner reads the flat object
// and copies only the keys that hold escapes, which is what makes a tokenizer cheap enough to load that
// preprocess_data's start-up does not dominate short runs (docs/bench/decisions.md).
//
// It accepts only the plain subset: one object whose values are integers that fit int32, strings
// with valid UTF-8 and well-formed escapes, JSON whitespace. Anything else (a float or nested value,
// a BOM, a lone surrogate escape, trailing text, invalid JSON) returns false, and the caller parses
// the file again with nlohmann::json, whose error messages and conversions then apply unchanged. What
// it accepts it decodes exactly as nlohmann::json does, except that a key given twice is returned
// twice (nlohmann keeps the last one): the caller must reject duplicates.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace megadlm {

// Appends (key, id) for every member of the object in `text`, in file order. Keys without escapes
// point into `text`; decoded keys point into `storage`, which this function sizes once (so the views
// stay valid as long as `text` and `storage` live and `storage` is not modified). Returns false,
// with `out` in an unspecified state, when `text` is outside the subset described above.
bool parse_flat_vocab_json(std::string_view text, std::vector<std::pair<std::string_view, int32_t>>& out,
                           std::string& storage);

}  // namespace megadlm
