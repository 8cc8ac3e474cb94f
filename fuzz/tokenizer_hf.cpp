// Fuzz target: the HuggingFace tokenizer.json loader (tokenizers/tokenizer_hf.h), then encode/decode.
//
// Input: the tokenizer.json text, optionally followed by a NUL byte and a text to encode (else a
// fixed sample with spaces, digits, accents and <|endoftext|>). A loaded tokenizer must
//   - encode the text to ids in [0, vocab_size) and decode those ids without an Error, and
//   - give the text back from decode(encode(text)) when nothing rewrites it (no NFC normalizer, no
//     add_prefix_space, no lstrip/rstrip) and the text is valid UTF-8,
// also after add_special_token("<|mask|>").
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/jsonl.h"
#include "tokenizers/tokenizer_hf.h"
#include "fuzz_util.h"

using namespace megadlm;

namespace {

const char kSample[] = "Hello world, it's 2024!  <|endoftext|> na\xc3\xafve caf\xc3\xa9\n\t\xe4\xb8\xad\xe6\x96\x87 x";

// Whether the loaded JSON asks for any rewriting of the text (then decode(encode(x)) may differ from x).
bool rewrites_text(const nlohmann::json& j) {
  if (j.contains("normalizer") && !j["normalizer"].is_null()) return true;
  const std::string dump = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // add_prefix_space defaults to true for a ByteLevel pre_tokenizer; be conservative.
  for (const char* key : {"add_prefix_space", "lstrip", "rstrip"}) {
    const std::string on = std::string("\"") + key + "\":true";
    if (dump.find(on) != std::string::npos) return true;
  }
  const auto& pt = j["pre_tokenizer"];
  if (pt.is_object() && pt.value("type", std::string()) == "ByteLevel" && !pt.contains("add_prefix_space")) return true;
  if (pt.is_object() && pt.contains("pretokenizers") && pt["pretokenizers"].is_array())
    for (const auto& p : pt["pretokenizers"])
      if (p.is_object() && p.value("type", std::string()) == "ByteLevel" && !p.contains("add_prefix_space"))
        return true;
  return false;
}

void check_round_trip(const HuggingFaceTokenizer& tok, std::string_view text, bool exact) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (const int32_t id : ids) FUZZ_REQUIRE(id >= 0 && id < tok.vocab_size(), "encode gives ids in [0, vocab_size)");
  std::string back;
  try {
    back = tok.decode(ids);
  } catch (const Error& e) {
    std::fprintf(stderr, "decode: %s\n", e.what());
    FUZZ_REQUIRE(false, "decode accepts every id encode gives");
  }
  if (exact) FUZZ_REQUIRE(back == text, "decode(encode(text)) == text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const std::string_view json_text = fuzz::as_view(data, nul ? static_cast<size_t>(nul - data) : size);
  const std::string_view text = nul ? fuzz::as_view(nul + 1, size - (nul + 1 - data)) : std::string_view(kSample);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: HuggingFaceTokenizer(spec) reports that itself; the parser is not ours
  }
  std::unique_ptr<HuggingFaceTokenizer> tok;
  try {
    tok = std::make_unique<HuggingFaceTokenizer>(j, "fuzz/tokenizer.json");
  } catch (const Error&) {
    return 0;
  }
  FUZZ_REQUIRE(tok->vocab_size() > 0 && tok->eod() >= 0 && tok->eod() < tok->vocab_size(), "eod inside the vocabulary");
  const bool exact = !rewrites_text(j) && utf8_invalid_at(text) == std::string_view::npos;
  check_round_trip(*tok, text, exact);
  try {
    const int32_t mask = tok->add_special_token("<|mask|>");
    FUZZ_REQUIRE(mask >= 0 && mask < tok->vocab_size() && tok->token_to_id("<|mask|>") == mask, "added token id");
  } catch (const Error&) {
    return 0;
  }
  check_round_trip(*tok, text, exact);
  return 0;
}
