// GPT2BPETokenizer: loading vocab.json + merges.txt, encode, decode and added special tokens.
#include "tokenizers/gpt2_bpe_tokenizer.h"

#include <algorithm>
#include <future>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizers/vocab_json.h"

namespace megadlm {

GPT2BPETokenizer::GPT2BPETokenizer(const TokenizerSpec& spec, int load_threads) {
  spec_ = spec;
  spec_.added_special_tokens.clear();
  MEGADLM_CHECK(!spec.vocab_file.empty(), "GPT2BPETokenizer needs --vocab-file (vocab.json)");
  MEGADLM_CHECK(!spec.merge_file.empty(), "GPT2BPETokenizer needs --merge-file (merges.txt)");

  // merges.txt: "a b" per line after an optional "#version" line; the pairs point into merges_text.
  // With two load threads it is read and split while vocab.json is parsed.
  std::string merges_text;
  std::vector<std::pair<std::string_view, std::string_view>> merges;
  auto parse_merges = [&] {
    merges_text = read_tokenizer_file(spec.merge_file, "merge file");
    merges.reserve(merges_text.size() / 8 + 1);  // GPT-2: ~9 bytes a line
    size_t line_no = 0;
    for (size_t pos = 0; pos < merges_text.size();) {
      size_t end = merges_text.find('\n', pos);
      if (end == std::string::npos) end = merges_text.size();
      std::string_view line(merges_text.data() + pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || (line_no == 1 && line.substr(0, 9) == "#version:")) continue;
      const size_t sp = line.find(' ');
      MEGADLM_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                     line.find(' ', sp + 1) == std::string_view::npos,
                    "merge file '", spec.merge_file, "' line ", line_no, ": expected two tokens 'a b', got '", line, "'");
      merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
  };
  std::future<void> merges_done;
  if (load_threads > 1)
    merges_done = std::async(std::launch::async, parse_merges);
  else
    parse_merges();
  // Waits for the merges (and rethrows their error) also when the vocabulary throws first.
  struct Waiter {
    std::future<void>& f;
    ~Waiter() {
      if (f.valid()) f.wait();
    }
  } waiter{merges_done};

  // The vocabulary: the hand parser when the file is plain (always, for released vocab.json files),
  // else nlohmann::json, whose messages then name what is wrong.
  const std::string vocab_text = read_tokenizer_file(spec.vocab_file, "vocab file");
  std::vector<std::pair<std::string_view, int32_t>> vocab;
  std::string decoded_keys;  // keys with escapes, decoded; `vocab` points into it and vocab_text
  nlohmann::json vj;         // the fallback's DOM; `vocab` points into it then
  if (!parse_flat_vocab_json(vocab_text, vocab, decoded_keys)) {
    vocab.clear();
    try {
      vj = nlohmann::json::parse(vocab_text);
    } catch (const nlohmann::json::exception& e) {
      fail("vocab file '", spec.vocab_file, "' is not valid JSON: ", e.what());
    }
    MEGADLM_CHECK(vj.is_object(), "vocab file '", spec.vocab_file, "' must hold a JSON object {token: id}");
    vocab.reserve(vj.size());
    for (auto it = vj.begin(); it != vj.end(); ++it) {
      MEGADLM_CHECK(it.value().is_number_integer(), "vocab file '", spec.vocab_file, "': the id of '", it.key(),
                    "' is not an integer");
      vocab.emplace_back(it.key(), it.value().get<int32_t>());
    }
  }

  if (merges_done.valid()) merges_done.get();

  MEGADLM_CHECK(!merges.empty(), "merge file '", spec.merge_file, "' holds no merges");
  bpe_ = std::make_unique<ByteLevelBPE>(vocab, merges, /*ignore_merges=*/false,
                                        "'" + spec.vocab_file + "' + '" + spec.merge_file + "'", load_threads);
  eod_ = token_to_id("<|endoftext|>");
  if (eod_ < 0) eod_ = add_special_token("<|endoftext|>");
  for (const std::string& t : spec.added_special_tokens) add_special_token(t);
}

GPT2BPETokenizer::~GPT2BPETokenizer() = default;

void GPT2BPETokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  bpe_->encode_text(PretokenizerPattern::Gpt2, reinterpret_cast<const uint8_t*>(text.data()), text.size(), out);
}

std::string GPT2BPETokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  out.reserve(n * 4);
  const int64_t base = bpe_->size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (bpe_->has_id(id)) {
      out += bpe_->token_bytes(id);
    } else if (id >= base && id < vocab_size()) {
      out += added_[id - base];
    } else {
      fail("GPT2BPETokenizer: cannot decode id ", id, " (vocabulary size ", vocab_size(), ")");
    }
  }
  return out;
}

int32_t GPT2BPETokenizer::token_to_id(std::string_view token) const {
  const int32_t id = bpe_->id_of(token);
  if (id >= 0) return id;
  for (size_t i = 0; i < added_.size(); ++i)
    if (added_[i] == token) return static_cast<int32_t>(bpe_->size() + i);
  return -1;
}

int32_t GPT2BPETokenizer::add_special_token(const std::string& token) {
  MEGADLM_CHECK(!token.empty(), "add_special_token: the token is empty");
  int32_t id = token_to_id(bytes_to_byte_level(token));
  if (id < 0) id = token_to_id(token);
  if (id < 0) {
    id = static_cast<int32_t>(vocab_size());
    added_.push_back(token);
  }
  auto& list = spec_.added_special_tokens;
  if (std::find(list.begin(), list.end(), token) == list.end() && token != "<|endoftext|>") list.push_back(token);
  return id;
}

}  // namespace megadlm
