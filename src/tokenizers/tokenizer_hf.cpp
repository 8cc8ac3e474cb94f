#include "tokenizers/tokenizer_hf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <queue>

#include "core/error.h"
#include "tokenizers/bpe_merges.h"
#include "tokenizers/unicode.h"

namespace megadlm {

using json = nlohmann::json;

namespace {

// The "type" of a tokenizer.json component, or "" when it has none.
std::string type_of(const json& j) {
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool get_bool(const json& obj, const char* key, bool fallback, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  MEGADLM_CHECK(it->is_boolean(), where, ".", key, " must be true or false, got ", it->dump());
  return it->get<bool>();
}

// A string field that must be null, absent or "" (an option we do not implement).
void require_empty(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty())) return;
  fail(where, ".", key, " = ", it->dump(), " is not supported (only null)");
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// The start of the character that ends just before byte `end` (> lo), for stepping back over UTF-8.
size_t char_start_before(const uint8_t* p, size_t lo, size_t end) {
  size_t j = end - 1;
  while (j > lo && end - j < 4 && (p[j] & 0xC0) == 0x80) --j;
  return j;
}

}  // namespace

// ==== loading =======================================================================================

HuggingFaceTokenizer::HuggingFaceTokenizer(const TokenizerSpec& spec) {
  MEGADLM_CHECK(!spec.tokenizer_model.empty(), "HuggingFaceTokenizer needs --tokenizer-model (a tokenizer.json)");
  const std::string text = read_tokenizer_file(spec.tokenizer_model, "tokenizer file");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("tokenizer file '", spec.tokenizer_model, "' is not valid JSON: ", e.what());
  }
  spec_ = spec;
  spec_.added_special_tokens.clear();
  load(j, spec.tokenizer_model, /*from_file=*/true);
  for (const std::string& t : spec.added_special_tokens) add_special_token(t);
}

HuggingFaceTokenizer::HuggingFaceTokenizer(const json& j, const std::string& source) {
  spec_.type = "HuggingFaceTokenizer";
  spec_.tokenizer_model = source;
  load(j, source, /*from_file=*/false);
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

void HuggingFaceTokenizer::load(const json& j, const std::string& source, bool from_file) {
  const std::string where = "tokenizer file '" + source + "'";
  MEGADLM_CHECK(j.is_object(), where, ": expected a JSON object at the top level");

  if (const auto it = j.find("normalizer"); it != j.end() && !it->is_null()) {
    MEGADLM_CHECK(it->is_object() && type_of(*it) == "NFC", where, ": normalizer ", it->dump().substr(0, 200),
                  " is not supported (only null or NFC)");
    nfc_ = true;
  }

  // ---- model ----
  const auto m = j.find("model");
  MEGADLM_CHECK(m != j.end() && m->is_object(), where, ": the field 'model' is missing");
  const std::string mw = where + ": model";
  const std::string mtype = type_of(*m);
  MEGADLM_CHECK(mtype.empty() || mtype == "BPE", mw, ".type '", mtype, "' is not supported (only BPE)");
  if (const auto it = m->find("dropout"); it != m->end() && !it->is_null())
    MEGADLM_CHECK(it->is_number() && it->get<double>() == 0.0, mw, ".dropout = ", it->dump(),
                  " is not supported (only null)");
  require_empty(*m, "continuing_subword_prefix", mw);
  require_empty(*m, "end_of_word_suffix", mw);
  const bool ignore_merges = get_bool(*m, "ignore_merges", false, mw);

  const auto v = m->find("vocab");
  MEGADLM_CHECK(v != m->end() && v->is_object(), mw, ".vocab is missing (or not an object)");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(v->size());
  for (auto it = v->begin(); it != v->end(); ++it) {
    MEGADLM_CHECK(it.value().is_number_integer(), mw, ".vocab: the id of '", it.key(), "' is not an integer");
    vocab.emplace_back(it.key(), it.value().get<int32_t>());
  }

  const auto mg = m->find("merges");
  MEGADLM_CHECK(mg != m->end() && mg->is_array(), mw, ".merges is missing (or not an array)");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(mg->size());
  for (size_t i = 0; i < mg->size(); ++i) {
    const json& e = (*mg)[i];
    if (e.is_string()) {  // "a b" (files written before tokenizers 0.20)
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      MEGADLM_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
                    mw, ".merges[", i, "] = '", s, "' is not two tokens 'a b'");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      MEGADLM_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), mw, ".merges[", i,
                    "] = ", e.dump(), " is neither 'a b' nor [\"a\", \"b\"]");
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
  bpe_ = std::make_unique<ByteLevelBPE>(vocab, merges, ignore_merges, where);
  vocab_size_ = bpe_->size();

  // ---- pre_tokenizer ----
  const auto pt = j.find("pre_tokenizer");
  MEGADLM_CHECK(pt != j.end() && pt->is_object(), where,
                ": pre_tokenizer is missing or null (a byte-level BPE needs ByteLevel)");
  auto read_byte_level = [&](const json& b, const std::string& w) {
    add_prefix_space_ = get_bool(b, "add_prefix_space", true, w);
    split_ = get_bool(b, "use_regex", true, w);
    pattern_ = PretokenizerPattern::Gpt2;
  };
  const std::string ptype = type_of(*pt);
  if (ptype == "ByteLevel") {
    read_byte_level(*pt, where + ": pre_tokenizer");
  } else if (ptype == "Sequence") {
    const auto list = pt->find("pretokenizers");
    MEGADLM_CHECK(list != pt->end() && list->is_array(), where, ": pre_tokenizer.pretokenizers is missing");
    std::string types;
    for (const json& p : *list) types += (types.empty() ? "" : ", ") + type_of(p);
    if (list->size() == 1 && type_of((*list)[0]) == "ByteLevel") {
      read_byte_level((*list)[0], where + ": pre_tokenizer.pretokenizers[0]");
    } else if (list->size() == 2 && type_of((*list)[0]) == "Split" && type_of((*list)[1]) == "ByteLevel") {
      const json& s = (*list)[0];
      const std::string sw = where + ": pre_tokenizer.pretokenizers[0] (Split)";
      const auto pat = s.find("pattern");
      MEGADLM_CHECK(pat != s.end() && pat->is_object() && pat->contains("Regex") && (*pat)["Regex"].is_string(), sw,
                    ": pattern must be {\"Regex\": ...}, got ", pat != s.end() ? pat->dump() : std::string("nothing"));
      pattern_ = pattern_from_regex((*pat)["Regex"].get<std::string>(), sw);
      const std::string behavior = s.value("behavior", std::string());
      MEGADLM_CHECK(behavior == "Isolated", sw, ": behavior '", behavior, "' is not supported (only Isolated)");
      MEGADLM_CHECK(!get_bool(s, "invert", false, sw), sw, ": invert = true is not supported");
      const std::string bw = where + ": pre_tokenizer.pretokenizers[1] (ByteLevel)";
      MEGADLM_CHECK(!get_bool((*list)[1], "use_regex", true, bw), bw,
                    ": use_regex = true after a Split is not supported (set it false)");
      MEGADLM_CHECK(!get_bool((*list)[1], "add_prefix_space", true, bw), bw,
                    ": add_prefix_space = true after a Split is not supported");
      split_ = true;
      add_prefix_space_ = false;
    } else {
      fail(where, ": pre_tokenizer Sequence [", types,
           "] is not supported (only [ByteLevel] or [Split, ByteLevel])");
    }
  } else {
    fail(where, ": pre_tokenizer type '", ptype, "' is not supported (only ByteLevel or Sequence)");
  }

  // ---- decoder ----
  if (const auto d = j.find("decoder"); d != j.end() && !d->is_null())
    MEGADLM_CHECK(type_of(*d) == "ByteLevel", where, ": decoder type '", type_of(*d),
                  "' is not supported (only ByteLevel)");

  // ---- added tokens ----
  if (const auto at = j.find("added_tokens"); at != j.end() && !at->is_null()) {
    MEGADLM_CHECK(at->is_array(), where, ": added_tokens must be an array");
    // added_index_of_id_ has a slot per id: bound the ids as ByteLevelBPE bounds the vocabulary's.
    const int64_t id_limit = vocab_size_ + 2 * static_cast<int64_t>(at->size()) + 1024;
    for (size_t i = 0; i < at->size(); ++i) {
      const json& t = (*at)[i];
      const std::string tw = where + ": added_tokens[" + std::to_string(i) + "]";
      MEGADLM_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                     t["content"].is_string(),
                    tw, " needs an integer 'id' and a string 'content'");
      AddedToken a;
      a.content = t["content"].get<std::string>();
      a.id = t["id"].get<int32_t>();
      MEGADLM_CHECK(a.id >= 0 && a.id < id_limit, tw, ": id ", a.id, " is out of range (the vocabulary has ", vocab_size_,
                    " ids; added tokens may extend it by at most 2 x their number + 1024)");
      MEGADLM_CHECK(!a.content.empty(), tw, ": content is empty");
      MEGADLM_CHECK(!get_bool(t, "single_word", false, tw), tw, ": single_word = true is not supported");
      a.special = get_bool(t, "special", false, tw);
      a.normalized = get_bool(t, "normalized", !a.special, tw);
      a.lstrip = get_bool(t, "lstrip", false, tw);
      a.rstrip = get_bool(t, "rstrip", false, tw);
      register_added(a);
    }
  }

  // ---- end of document ----
  std::vector<std::string> candidates;
  const std::string config = dir_of(source) + "/tokenizer_config.json";
  if (from_file && std::ifstream(config).good()) {
    json c;
    try {
      c = json::parse(read_tokenizer_file(config, "tokenizer config"));
    } catch (const json::exception& e) {
      fail("tokenizer config '", config, "' is not valid JSON: ", e.what());
    }
    if (const auto e = c.find("eos_token"); e != c.end()) {
      if (e->is_string()) candidates.push_back(e->get<std::string>());
      if (e->is_object() && e->contains("content") && (*e)["content"].is_string())
        candidates.push_back((*e)["content"].get<std::string>());
    }
  }
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) candidates.push_back(name);
  for (const std::string& c : candidates)
    if ((eod_ = token_to_id(c)) >= 0) break;
  if (eod_ < 0) {
    // A new id past the file's vocabulary, for the data pipeline's document separator only: not
    // matched in text, where `tokenizers` (which does not know it) reads "<|endoftext|>" as ordinary
    // text. Not recorded in spec_: rebuilding from the same file appends it again.
    eod_ = static_cast<int32_t>(vocab_size_);
    register_added(AddedToken{"<|endoftext|>", eod_, false, false, false, true}, /*match_in_text=*/false);
  }
}

void HuggingFaceTokenizer::register_added(const AddedToken& t, bool match_in_text) {
  for (const AddedToken& a : added_)
    if (a.content == t.content) return;  // `tokenizers` keeps the first of duplicates
  added_.push_back(t);
  vocab_size_ = std::max<int64_t>(vocab_size_, t.id + 1);
  added_index_of_id_.resize(vocab_size_, -1);
  added_index_of_id_[t.id] = static_cast<int32_t>(added_.size() - 1);
  if (!match_in_text) return;
  const int phase = t.normalized ? 1 : 0;
  first_byte_[phase][static_cast<uint8_t>(t.content[0])] = true;
  std::vector<TrieNode>& trie = trie_[phase];
  if (trie.empty()) trie.emplace_back();
  int32_t node = 0;
  for (unsigned char c : t.content) {
    int32_t next = -1;
    for (const auto& [byte, child] : trie[node].edges)
      if (byte == c) next = child;
    if (next < 0) {
      next = static_cast<int32_t>(trie.size());
      trie[node].edges.emplace_back(c, next);
      trie.emplace_back();
    }
    node = next;
  }
  trie[node].token = static_cast<int32_t>(added_.size() - 1);
}

// ==== encoding ======================================================================================

void HuggingFaceTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  encode_phase(0, reinterpret_cast<const uint8_t*>(text.data()), text.size(), out);
}

// Phase 0 splits out added tokens with normalized = false, then the gaps it leaves are normalized
// (NFC) and phase 1 splits out those with normalized = true, phase 2 is BPE: the order of `tokenizers`'
// AddedVocabulary.
void HuggingFaceTokenizer::encode_phase(int phase, const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  if (phase == 2) return encode_segment(p, n, out);
  const std::string_view view(reinterpret_cast<const char*>(p), n);
  std::string normalized;
  if (phase == 1 && nfc_ && !unicode::is_nfc_quick(view)) {
    unicode::append_nfc(view, normalized);
    p = reinterpret_cast<const uint8_t*>(normalized.data());
    n = normalized.size();
  }
  const bool* starts = first_byte_[phase];
  size_t seg = 0;  // start of the text not yet emitted
  for (size_t i = 0; i < n; ++i) {
    if (!starts[p[i]]) continue;
    // The longest added token starting at i (leftmost-longest, as `tokenizers`' Aho-Corasick).
    const std::vector<TrieNode>& trie = trie_[phase];
    const AddedToken* best = nullptr;
    for (size_t k = i, node = 0; k < n; ++k) {
      int32_t next = -1;
      for (const auto& [byte, child] : trie[node].edges)
        if (byte == p[k]) next = child;
      if (next < 0) break;
      node = static_cast<size_t>(next);
      if (trie[node].token >= 0) best = &added_[trie[node].token];
    }
    if (!best) continue;
    size_t s = i, e = i + best->content.size();
    uint32_t cp;
    while (best->lstrip && s > seg) {  // absorb the whitespace before the token
      const size_t j = char_start_before(p, seg, s);
      const int len = unicode::decode_utf8(p + j, s - j, &cp);
      if (len != static_cast<int>(s - j) || unicode::char_class(cp) != unicode::kSpace) break;
      s = j;
    }
    while (best->rstrip && e < n) {  // and after it
      const int len = unicode::decode_utf8(p + e, n - e, &cp);
      if (unicode::char_class(cp) != unicode::kSpace) break;
      e += len;
    }
    encode_phase(phase + 1, p + seg, s - seg, out);
    out.push_back(best->id);
    seg = e;
    i = e - 1;
  }
  encode_phase(phase + 1, p + seg, n - seg, out);
}

void HuggingFaceTokenizer::encode_segment(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  if (n == 0) return;
  if (add_prefix_space_ && p[0] != ' ') {
    thread_local std::string buf;
    buf.assign(1, ' ');
    buf.append(reinterpret_cast<const char*>(p), n);
    p = reinterpret_cast<const uint8_t*>(buf.data());
    n = buf.size();
    // buf stays alive (and unchanged) until the calls below return
    if (split_) return bpe_->encode_text(pattern_, p, n, out);
    return bpe_->encode_piece(p, n, out);
  }
  if (split_) return bpe_->encode_text(pattern_, p, n, out);
  bpe_->encode_piece(p, n, out);
}

std::string HuggingFaceTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  out.reserve(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id >= 0 && id < vocab_size_ && added_index_of_id_.size() > static_cast<size_t>(id) &&
        added_index_of_id_[id] >= 0) {
      out += added_[added_index_of_id_[id]].content;
    } else if (bpe_->has_id(id)) {
      out += bpe_->token_bytes(id);
    } else {
      fail("HuggingFaceTokenizer '", spec_.tokenizer_model, "': cannot decode id ", id, " (vocabulary size ",
           vocab_size_, ")");
    }
  }
  return out;
}

int32_t HuggingFaceTokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : added_)
    if (a.content == token) return a.id;
  return bpe_->id_of(token);
}

int32_t HuggingFaceTokenizer::add_special_token(const std::string& token) {
  MEGADLM_CHECK(!token.empty(), "add_special_token: the token is empty");
  int32_t id = -1;
  for (const AddedToken& a : added_)
    if (a.content == token) id = a.id;
  if (id < 0) {
    // As `tokenizers` does: a token the model has keeps its id, and is now split out of text too.
    id = bpe_->id_of(token);
    if (id < 0) id = static_cast<int32_t>(vocab_size_);
    register_added(AddedToken{token, id, false, false, false, true});
  }
  auto& list = spec_.added_special_tokens;
  if (std::find(list.begin(), list.end(), token) == list.end()) list.push_back(token);
  return id;
}

// ==== training ======================================================================================

void ByteLevelBpeTrainer::add_text(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t e = next_piece(PretokenizerPattern::Gpt2, s, text.size(), i);
    ++counts_[std::string(text.substr(i, e - i))];
    i = e;
  }
}


nlohmann::ordered_json ByteLevelBpeTrainer::train(const BpeTrainerOptions& opt) const {
  MEGADLM_CHECK(opt.vocab_size > 0, "BPE training: --vocab-size must be positive (got ", opt.vocab_size, ")");
  MEGADLM_CHECK(opt.min_frequency >= 0, "BPE training: --min-frequency must be >= 0 (got ", opt.min_frequency, ")");
  // Tokens by id, in vocabulary spelling (specials as written).
  std::vector<std::string> spelling;
  std::unordered_map<std::string, int32_t> id_of;
  auto add_token = [&](const std::string& s) {
    const auto [it, inserted] = id_of.emplace(s, static_cast<int32_t>(spelling.size()));
    if (inserted) spelling.push_back(s);
    return it->second;
  };
  for (const std::string& t : opt.special_tokens) {
    MEGADLM_CHECK(!t.empty(), "BPE training: a special token is empty");
    add_token(t);
  }
  // The 256 byte characters in code-point order, as `tokenizers` sorts its alphabet.
  std::array<int, 256> bytes_by_char;
  for (int b = 0; b < 256; ++b) bytes_by_char[b] = b;
  std::sort(bytes_by_char.begin(), bytes_by_char.end(),
            [](int x, int y) { return byte_to_unicode()[x] < byte_to_unicode()[y]; });
  std::array<int32_t, 256> byte_token;
  for (int b : bytes_by_char) byte_token[b] = add_token(bytes_to_byte_level(std::string(1, static_cast<char>(b))));

  // Words as symbol sequences, with their counts.
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> count;
  words.reserve(counts_.size());
  count.reserve(counts_.size());
  for (const auto& [piece, c] : counts_) {
    std::vector<int32_t> w(piece.size());
    for (size_t i = 0; i < piece.size(); ++i) w[i] = byte_token[static_cast<uint8_t>(piece[i])];
    words.push_back(std::move(w));
    count.push_back(c);
  }

  std::vector<std::pair<std::string, std::string>> merges;
  const auto full = [&] { return static_cast<int64_t>(id_of.size()) >= opt.vocab_size; };
  const auto merge = [&](int32_t x, int32_t y) {
    merges.emplace_back(spelling[x], spelling[y]);
    return add_token(spelling[x] + spelling[y]);
  };
  run_bpe_merges(words, count, opt.min_frequency, full, merge);

  // ---- the tokenizer.json ----
  using ojson = nlohmann::ordered_json;
  ojson added = ojson::array();
  for (const std::string& t : opt.special_tokens)
    added.push_back({{"id", id_of[t]}, {"content", t}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  ojson vocab = ojson::object();
  {
    // ordered_json's operator[] searches linearly; the spellings are distinct, so append directly.
    auto& entries = static_cast<ojson::object_t::Container&>(vocab.get_ref<ojson::object_t&>());
    entries.reserve(spelling.size());
    for (size_t id = 0; id < spelling.size(); ++id) entries.emplace_back(spelling[id], ojson(id));
  }
  ojson merge_list = ojson::array();
  for (const auto& [x, y] : merges) merge_list.push_back(ojson::array({x, y}));
  auto byte_level = [](bool prefix, bool trim) {
    return ojson{{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", trim}, {"use_regex", true}};
  };
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level(false, true);
  j["post_processor"] = byte_level(true, false);
  j["decoder"] = byte_level(true, true);
  j["model"] = ojson{{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", false},
                     {"vocab", vocab},
                     {"merges", merge_list}};
  return j;
}

}  // namespace megadlm
