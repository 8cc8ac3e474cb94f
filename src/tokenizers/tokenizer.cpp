// TokenizerSpec <-> JSON and the factory behind --tokenizer-type.
#include "tokenizers/tokenizer.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "tokenizers/gpt2_bpe_tokenizer.h"
#include "tokenizers/tokenizer_hf.h"
#include "tokenizers/tokenizer_sentencepiece.h"
#include "tokenizers/tokenizer_simple.h"
#include "tokenizers/wordpiece.h"

namespace megadlm {

namespace {

enum class Needs { VocabAndMerges, Vocab, Model, VocabSize, Nothing };

struct TypeInfo {
  const char* name;
  Needs needs;
};

// Megatron's --tokenizer-type names (Llama2Tokenizer and GPTSentencePieceTokenizer are SentencePiece
// models too).
constexpr TypeInfo kTypes[] = {
    {"GPT2BPETokenizer", Needs::VocabAndMerges}, {"HuggingFaceTokenizer", Needs::Model},
    {"SentencePieceTokenizer", Needs::Model},    {"Llama2Tokenizer", Needs::Model},
    {"GPTSentencePieceTokenizer", Needs::Model}, {"NullTokenizer", Needs::VocabSize},
    {"ByteTokenizer", Needs::Nothing},           {"BertWordPieceLowerCase", Needs::Vocab},
    {"BertWordPieceCase", Needs::Vocab},
};

const TypeInfo& type_info(const std::string& type) {
  for (const TypeInfo& t : kTypes)
    if (type == t.name) return t;
  std::string known;
  for (const TypeInfo& t : kTypes) known += std::string(known.empty() ? "" : ", ") + t.name;
  fail("unknown tokenizer type '", type, "' (known: ", known, ")");
}

}  // namespace

nlohmann::json TokenizerSpec::to_json() const {
  return nlohmann::json{{"type", type},
                        {"vocab_file", vocab_file},
                        {"merge_file", merge_file},
                        {"tokenizer_model", tokenizer_model},
                        {"null_vocab_size", null_vocab_size},
                        {"added_special_tokens", added_special_tokens}};
}

TokenizerSpec TokenizerSpec::from_json(const nlohmann::json& j) {
  MEGADLM_CHECK(j.is_object(), "tokenizer spec: expected a JSON object, got ", j.type_name());
  auto get_string = [&](const char* key, bool required, std::string& dst) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      MEGADLM_CHECK(!required, "tokenizer spec: key '", key, "' is missing");
      return;
    }
    MEGADLM_CHECK(it->is_string(), "tokenizer spec: key '", key, "' must be a string, got ", it->type_name());
    dst = it->get<std::string>();
  };
  TokenizerSpec s;
  get_string("type", true, s.type);
  const Needs needs = type_info(s.type).needs;
  get_string("vocab_file", needs == Needs::VocabAndMerges || needs == Needs::Vocab, s.vocab_file);
  get_string("merge_file", needs == Needs::VocabAndMerges, s.merge_file);
  get_string("tokenizer_model", needs == Needs::Model, s.tokenizer_model);
  if (const auto it = j.find("null_vocab_size"); it != j.end() && !it->is_null()) {
    MEGADLM_CHECK(it->is_number_integer(), "tokenizer spec: key 'null_vocab_size' must be an integer, got ", *it);
    s.null_vocab_size = it->get<int64_t>();
  } else {
    MEGADLM_CHECK(needs != Needs::VocabSize, "tokenizer spec: key 'null_vocab_size' is missing");
  }
  if (const auto it = j.find("added_special_tokens"); it != j.end() && !it->is_null()) {
    MEGADLM_CHECK(it->is_array(), "tokenizer spec: key 'added_special_tokens' must be an array of strings");
    for (const auto& t : *it) {
      MEGADLM_CHECK(t.is_string(), "tokenizer spec: 'added_special_tokens' holds a non-string: ", t);
      s.added_special_tokens.push_back(t.get<std::string>());
    }
  }
  return s;
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec, int load_threads) {
  const std::string& t = spec.type;
  (void)type_info(t);  // unknown names fail here, listing the known ones
  if (t == "GPT2BPETokenizer") return std::make_unique<GPT2BPETokenizer>(spec, load_threads);
  if (t == "HuggingFaceTokenizer") return std::make_unique<HuggingFaceTokenizer>(spec);
  if (t == "NullTokenizer") return std::make_unique<NullTokenizer>(spec);
  if (t == "ByteTokenizer") return std::make_unique<ByteTokenizer>(spec);
  if (t == "BertWordPieceLowerCase" || t == "BertWordPieceCase") return std::make_unique<WordPieceTokenizer>(spec);
  return make_sentencepiece_tokenizer(spec);  // the three SentencePiece names
}

std::string read_tokenizer_file(const std::string& path, std::string_view what) {
  MEGADLM_CHECK(!path.empty(), "no ", what, " given");
  std::ifstream f = open_input_file(path, what);
  // One read into a string of the file's size (a stringstream would copy the text twice); a file
  // that cannot tell its size (a pipe) is read as a stream.
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  if (size >= 0) {
    f.seekg(0, std::ios::beg);
    std::string text(static_cast<size_t>(size), '\0');
    f.read(text.data(), size);
    MEGADLM_CHECK(f.gcount() == size, "cannot read ", what, " '", path, "' (", f.gcount(), " of ", size, " bytes)");
    return text;
  }
  f.clear();
  std::ostringstream ss;
  ss << f.rdbuf();
  MEGADLM_CHECK(!f.bad(), "cannot read ", what, " '", path, "'");
  return ss.str();
}

}  // namespace megadlm
