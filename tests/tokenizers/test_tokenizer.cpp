// Tokenizers against ids computed by HuggingFace `tokenizers` and `sentencepiece` (fixtures written by
// tools/reference/{gpt2_expected_ids,make_hf_fixtures,make_trainer_fixture,make_sentencepiece_fixture}.py).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/philox.h"
#include "tokenizers/byte_level_bpe.h"
#include "tokenizers/gpt2_bpe_tokenizer.h"
#include "tokenizers/pretokenizer.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/tokenizer_hf.h"
#include "tokenizers/unicode.h"
#include "tokenizers/vocab_json.h"
#include "test_util.h"
#include "tokenizers/tokenizer_fixtures.h"

using namespace megadlm;
using json = nlohmann::json;

namespace {

std::string fixture(const std::string& name) { return test::tokenizer_fixture(name); }
using test::read_jsonl;

std::vector<std::string> brown_texts(const std::string& path) {
  std::vector<std::string> out;
  for (const json& j : read_jsonl(path)) out.push_back(j.at("text").get<std::string>());
  return out;
}

TokenizerSpec gpt2_spec(const std::string& vocab) {
  TokenizerSpec s;
  s.type = "GPT2BPETokenizer";
  s.vocab_file = vocab;
  s.merge_file = vocab.substr(0, vocab.size() - std::string("vocab.json").size()) + "merges.txt";
  return s;
}

// One GPT-2 tokenizer for the tests that only encode and decode (loading takes ~0.1 s).
const GPT2BPETokenizer& shared_gpt2(const std::string& vocab) {
  static const GPT2BPETokenizer tok(gpt2_spec(vocab));
  return tok;
}

TokenizerSpec hf_spec(const std::string& path) {
  TokenizerSpec s;
  s.type = "HuggingFaceTokenizer";
  s.tokenizer_model = path;
  return s;
}

uint64_t fnv1a64(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k) h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
  return h;
}

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Random bytes (any values, mostly invalid UTF-8) of length n.
std::string random_bytes(size_t n, uint64_t seed) {
  CounterRng rng(seed, RngPurpose::Test);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(rng.bits(i, 0)[0] & 0xFF);
  return s;
}

// A temporary file holding `content`, removed at scope exit.
struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::string& content) {
    path = (std::filesystem::temp_directory_path() / ("mdlm_tok_" + std::to_string(::getpid()) + "_" + name)).string();
    std::ofstream(path, std::ios::binary) << content;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

// Expects `f` to throw Error whose message holds every string of `parts`.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown (expected one mentioning " << parts.at(0) << ")";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

// ---- unicode ---------------------------------------------------------------------------------------

TEST(Unicode, ClassesOfSampleCodePoints) {
  using namespace unicode;
  EXPECT_STREQ(table_version(), "16.0.0");
  struct Case {
    uint32_t cp;
    CharClass cls;
  } cases[] = {
      {'a', kLetter},   {'Z', kLetter},   {'5', kNumber},    {' ', kSpace},    {'\t', kSpace},
      {'\r', kSpace},   {0x0B, kSpace},   {'!', kOther},     {'_', kOther},    {0x00, kOther},
      {0x85, kSpace},   {0xA0, kSpace},   {0x1680, kSpace},  {0x2028, kSpace}, {0x3000, kSpace},
      {0x200B, kOther}, {0xFEFF, kOther}, {0x0663, kNumber}, {0x216B, kNumber}, {0x00BD, kNumber},
      {0x00B2, kNumber}, {0x4E2D, kLetter}, {0xAC00, kLetter}, {0x0301, kOther}, {0x093F, kOther},
      {0x1C89, kLetter},  // assigned in Unicode 16.0
      {0x1F980, kOther},  {0x20000, kLetter}, {0x10FFFF, kOther}, {0x110000, kOther}, {kInvalid, kOther},
  };
  for (const Case& c : cases) EXPECT_EQ(char_class(c.cp), c.cls) << std::hex << "U+" << c.cp;
}

TEST(Unicode, Utf8DecodeAcceptsValidAndRejectsInvalid) {
  using namespace unicode;
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(cp, s);
    uint32_t got;
    EXPECT_EQ(decode_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size(), &got), static_cast<int>(s.size()));
    EXPECT_EQ(got, cp);
    EXPECT_TRUE(is_valid_utf8(s));
  }
  // Overlong, surrogate, above U+10FFFF, lone continuation, truncated, F5..FF.
  for (std::string bad : {std::string("\xC0\x80"), std::string("\xC1\xBF"), std::string("\xE0\x80\x80"),
                          std::string("\xED\xA0\x80"), std::string("\xF0\x80\x80\x80"), std::string("\xF4\x90\x80\x80"),
                          std::string("\x80"), std::string("\xE4\xB8"), std::string("\xF5\x80\x80\x80"),
                          std::string("\xFF")}) {
    uint32_t got;
    EXPECT_EQ(decode_utf8(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), &got), 1);
    EXPECT_EQ(got, kInvalid);
    EXPECT_FALSE(is_valid_utf8(bad));
  }
}

TEST(Unicode, NfcMatchesTokenizersNormalizer) {
  const auto cases = read_jsonl(fixture("nfc_expected.jsonl"));
  ASSERT_GE(cases.size(), 200u);
  int changed = 0;
  for (const json& c : cases) {
    const std::string text = c["text"], want = c["nfc"];
    EXPECT_EQ(unicode::to_nfc(text), want) << json(text).dump();
    if (unicode::is_nfc_quick(text)) {
      EXPECT_EQ(text, want) << "the quick check wrongly said yes: " << json(text).dump();
    }
    EXPECT_EQ(unicode::to_nfc(want), want);  // idempotent
    changed += text != want;
  }
  EXPECT_GT(changed, 100);  // the fixture exercises composition, not just pass-through
  const std::string bad = "e\xCC\x81\xFF\xCC\x81x";  // invalid byte between: it blocks, and survives
  EXPECT_EQ(unicode::to_nfc(bad), "\xC3\xA9\xFF\xCC\x81x");
  EXPECT_TRUE(unicode::is_nfc_quick("plain ASCII, \xE6\x97\xA5\xE6\x9C\xAC \xC3\xA9"));
}

// ---- pre-tokenizer ------------------------------------------------------------------------------------

namespace {
std::vector<std::string> pieces(PretokenizerPattern p, const std::string& s) {
  std::vector<std::string> out;
  for (auto [b, e] : split_pieces(p, s)) out.push_back(s.substr(b, e - b));
  return out;
}
using Pieces = std::vector<std::string>;
}  // namespace

TEST(Pretokenizer, Gpt2PatternByHand) {
  const auto G = PretokenizerPattern::Gpt2;
  EXPECT_EQ(pieces(G, "Hello  world"), (Pieces{"Hello", " ", " world"}));
  EXPECT_EQ(pieces(G, "I'm HE'S 'sup's"), (Pieces{"I", "'m", " HE", "'", "S", " '", "sup", "'s"}));
  EXPECT_EQ(pieces(G, "a1b2 33!!x"), (Pieces{"a", "1", "b", "2", " 33", "!!", "x"}));
  EXPECT_EQ(pieces(G, "end  \n"), (Pieces{"end", "  \n"}));
  EXPECT_EQ(pieces(G, "a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces(G, "a \tb"), (Pieces{"a", " ", "\t", "b"}));
  EXPECT_EQ(pieces(G, " "), (Pieces{" "}));
  EXPECT_TRUE(pieces(G, "").empty());
  // Invalid bytes are single "other" characters: they join punctuation runs, never letters.
  EXPECT_EQ(pieces(G, "ab\xFF\xFE" "cd \xC0!"), (Pieces{"ab", "\xFF\xFE", "cd", " \xC0!"}));
}

TEST(Pretokenizer, Llama3AndQwen2PatternsByHand) {
  const auto L = PretokenizerPattern::Llama3, Q = PretokenizerPattern::Qwen2;
  EXPECT_EQ(pieces(L, "12345 x"), (Pieces{"123", "45", " x"}));
  EXPECT_EQ(pieces(Q, "123 x"), (Pieces{"1", "2", "3", " x"}));
  EXPECT_EQ(pieces(L, "HE'S we'Ll \"Hi\"Yo"), (Pieces{"HE", "'S", " we", "'Ll", " \"", "Hi", "\"Yo"}));
  EXPECT_EQ(pieces(L, "'\xC5\xBF"), (Pieces{"'\xC5\xBF"}));  // 'ſ matches 's case-insensitively
  EXPECT_EQ(pieces(L, "a;\r\n\r\nb  \n c"), (Pieces{"a", ";\r\n\r\n", "b", "  \n", " c"}));
  EXPECT_EQ(pieces(L, "x \n\n"), (Pieces{"x", " \n\n"}));
  EXPECT_EQ(pieces(L, "\tword"), (Pieces{"\tword"}));
  // Every known regex is recognised, anything else is an Error quoting it.
  for (int p = 0; p < 3; ++p)
    EXPECT_EQ(pattern_from_regex(kPretokenizerRegex[p], "x"), static_cast<PretokenizerPattern>(p));
  expect_error([] { pattern_from_regex("\\w+|\\s+", "tok.json"); }, {"tok.json", "\\w+|\\s+"});
}

// ---- GPT-2 -------------------------------------------------------------------------------------------

TEST(GPT2BPE, ExactIdsOnTrickyStrings) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  const GPT2BPETokenizer& tok = shared_gpt2(vocab);
  const auto cases = read_jsonl(fixture("gpt2_expected.jsonl"));
  ASSERT_GE(cases.size(), 40u);
  for (const json& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << json(text).dump();
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(GPT2BPE, ExactIdsAndRoundTripOnBrownCorpus) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  const GPT2BPETokenizer& tok = shared_gpt2(vocab);
  const auto texts = brown_texts(brown);
  const auto expected = read_jsonl(fixture("brown_gpt2_expected.jsonl"));
  ASSERT_EQ(texts.size(), expected.size());
  std::vector<int32_t> ids;
  for (size_t d = 0; d < texts.size(); ++d) {
    ids.clear();
    tok.encode(texts[d], ids);
    ASSERT_EQ(static_cast<int64_t>(texts[d].size()), expected[d]["bytes"].get<int64_t>()) << "document " << d;
    ASSERT_EQ(static_cast<int64_t>(ids.size()), expected[d]["n_ids"].get<int64_t>()) << "document " << d;
    ASSERT_EQ(hex64(fnv1a64(ids)), expected[d]["fnv1a64"].get<std::string>()) << "document " << d;
    ASSERT_EQ(tok.decode(ids), texts[d]) << "document " << d;
  }
}

TEST(GPT2BPE, ThreadsGiveTheSameIds) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  const GPT2BPETokenizer& tok = shared_gpt2(vocab);
  auto texts = brown_texts(brown);
  texts.resize(60);
  std::vector<std::vector<int32_t>> serial(texts.size()), parallel(texts.size());
  for (size_t d = 0; d < texts.size(); ++d) serial[d] = tok.encode(texts[d]);
#pragma omp parallel for num_threads(2) schedule(dynamic)
  for (int64_t d = 0; d < static_cast<int64_t>(texts.size()); ++d) parallel[d] = tok.encode(texts[d]);
  EXPECT_EQ(serial, parallel);
}

TEST(GPT2BPE, ArbitraryBytesRoundTrip) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  const GPT2BPETokenizer& tok = shared_gpt2(vocab);
  for (size_t n : {1, 2, 7, 64, 333, 5000}) {
    const std::string s = random_bytes(n, 100 + n);
    const auto ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    EXPECT_EQ(tok.decode(ids), s) << "n = " << n;
  }
  for (std::string s : {std::string("\xFF\xFE"), std::string("abc\xE4\xB8"), std::string("\xC0\x80 x"),
                        std::string("\xED\xA0\x80 surrogate"), std::string(1, '\0')})
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
}

// The two merge implementations (array for short pieces, heap for long ones) agree on any input, and
// a 100k-character word without spaces is encoded (the heap keeps it O(n log n)).
TEST(GPT2BPE, MergeVariantsAgreeAndLongWordsWork) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  const GPT2BPETokenizer& tok = shared_gpt2(vocab);
  const TokenizerSpec spec = gpt2_spec(vocab);
  std::unique_ptr<ByteLevelBPE> bpe;
  {
    // Rebuild the model alone through the HF path: the same vocab and merges.
    json vj = json::parse(read_tokenizer_file(spec.vocab_file, "vocab"));
    std::vector<std::pair<std::string, int32_t>> v;
    for (auto it = vj.begin(); it != vj.end(); ++it) v.emplace_back(it.key(), it.value().get<int32_t>());
    std::vector<std::pair<std::string, std::string>> m;
    std::ifstream mf(spec.merge_file);
    std::string line;
    std::getline(mf, line);
    while (std::getline(mf, line))
      if (!line.empty()) m.emplace_back(line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1));
    bpe = std::make_unique<ByteLevelBPE>(v, m, false, "gpt2");
  }
  const std::string alphabet = "etaoin shrdlu";
  for (int trial = 0; trial < 200; ++trial) {
    CounterRng rng(trial, RngPurpose::Test);
    const size_t n = 2 + rng.bits(0, 0)[0] % 120;
    std::vector<int32_t> a(n);
    for (size_t i = 0; i < n; ++i) {
      const char c = alphabet[rng.bits(i + 1, 0)[0] % alphabet.size()];
      a[i] = bpe->id_of_bytes(std::string(1, c));
    }
    std::vector<int32_t> b = a;
    bpe->merge_small(a);
    bpe->merge_large(b);
    ASSERT_EQ(a, b) << "trial " << trial;
  }
  std::string word;
  for (int i = 0; i < 100000; ++i) word += "abcdefghij"[(i * 7 + i / 13) % 10];
  const auto ids = tok.encode(word);
  EXPECT_LT(ids.size(), word.size());
  EXPECT_EQ(tok.decode(ids), word);
  const std::string as(100000, 'a');
  EXPECT_EQ(tok.decode(tok.encode(as)), as);
}

namespace {

// The GPT-2 model alone (ByteLevelBPE), built from vocab.json and merges.txt as the HF path does.
std::unique_ptr<ByteLevelBPE> gpt2_model(const std::string& vocab) {
  const TokenizerSpec spec = gpt2_spec(vocab);
  std::vector<std::pair<std::string, int32_t>> v;
  json vj = json::parse(read_tokenizer_file(spec.vocab_file, "vocab"));
  for (auto it = vj.begin(); it != vj.end(); ++it) v.emplace_back(it.key(), it.value().get<int32_t>());
  std::vector<std::pair<std::string, std::string>> m;
  std::ifstream mf(spec.merge_file);
  std::string line;
  std::getline(mf, line);
  while (std::getline(mf, line))
    if (!line.empty()) m.emplace_back(line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1));
  return std::make_unique<ByteLevelBPE>(v, m, false, "gpt2");
}

// n distinct random lower-case words of 3-10 letters, each with a leading space (one GPT-2 piece).
std::vector<std::string> distinct_words(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::set<std::string> seen;
  std::vector<std::string> words;
  while (words.size() < n) {
    std::string w = " ";
    for (size_t len = 3 + rng() % 8; len > 0; --len) w += static_cast<char>('a' + rng() % 26);
    if (seen.insert(w).second) words.push_back(w);
  }
  return words;
}

// Plain BPE per word, no cache: bytes, then the merges.
std::vector<std::vector<int32_t>> plain_bpe(const ByteLevelBPE& bpe, const std::vector<std::string>& words) {
  std::vector<std::vector<int32_t>> ids(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    for (unsigned char c : words[i]) ids[i].push_back(bpe.id_of_bytes(std::string(1, static_cast<char>(c))));
    bpe.merge_small(ids[i]);
  }
  return ids;
}

}  // namespace

// The piece caches (the shared one, 131072 pieces, then the per-thread ones, 65536 pieces each and
// cleared when full): 90k distinct words give the ids of BPE on each word alone, cold, warm, and from
// two threads at once.
TEST(GPT2BPE, PieceCachesGiveTheIdsOfPlainBpe) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  const std::unique_ptr<ByteLevelBPE> model = gpt2_model(vocab);
  const ByteLevelBPE& bpe = *model;
  const std::vector<std::string> words = distinct_words(90000, 5);
  // The GPT-2 pattern makes each " word" one piece.
  const std::vector<std::vector<int32_t>> want = plain_bpe(bpe, words);
  auto encode_range = [&](size_t b, size_t e) {
    std::vector<int32_t> ids;
    for (size_t i = b; i < e; ++i) {
      const size_t before = ids.size();
      bpe.encode_text(PretokenizerPattern::Gpt2, reinterpret_cast<const uint8_t*>(words[i].data()),
                      words[i].size(), ids);
      if (std::vector<int32_t>(ids.begin() + before, ids.end()) != want[i]) return i;
    }
    return e;
  };
  EXPECT_EQ(encode_range(0, words.size()), words.size());  // cold: fills the cache, clears it, goes on
  EXPECT_EQ(encode_range(0, words.size()), words.size());  // warm: every piece from a cache
  size_t a = 0, b = 0;
  std::thread t1([&] { a = encode_range(0, words.size()); });
  std::thread t2([&] { b = encode_range(words.size() / 3, words.size()); });
  t1.join();
  t2.join();
  EXPECT_EQ(a, words.size());
  EXPECT_EQ(b, words.size());
}

namespace {

// Runs encode_one(thread, k) for k = 0..n-1 on `threads` std::threads, each starting at a different
// place (thread t at k = t * n / threads, wrapping around) so that they race to cache the same pieces.
template <typename F>
void on_threads(int threads, size_t n, F&& encode_one) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t j = 0; j < n; ++j) encode_one(t, (j + static_cast<size_t>(t) * n / threads) % n);
    });
  for (std::thread& th : pool) th.join();
}

}  // namespace

// Four threads encoding Brown at once with one tokenizer (one shared piece cache, filled by all of
// them concurrently) give exactly the ids of one thread with a fresh tokenizer. Run under
// -fsanitize=thread, this is also the data-race check of the shared cache.
TEST(GPT2BPE, SharedCacheFourThreadsGiveTheIdsOfOneThread) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  const auto texts = brown_texts(brown);
  std::vector<std::vector<int32_t>> serial(texts.size());
  {
    const GPT2BPETokenizer fresh(gpt2_spec(vocab));
    for (size_t d = 0; d < texts.size(); ++d) serial[d] = fresh.encode(texts[d]);
  }
  const GPT2BPETokenizer tok(gpt2_spec(vocab), /*load_threads=*/2);
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<int32_t>>> got(kThreads, std::vector<std::vector<int32_t>>(texts.size()));
  for (auto& per_thread : got)
    for (auto& ids : per_thread) ids.assign(1, -7);  // poisoned: encode appends, so a leftover shows
  on_threads(kThreads, texts.size(), [&](int t, size_t d) {
    got[t][d].clear();
    tok.encode(texts[d], got[t][d]);
  });
  for (int t = 0; t < kThreads; ++t)
    for (size_t d = 0; d < texts.size(); ++d) ASSERT_EQ(got[t][d], serial[d]) << "thread " << t << ", document " << d;
}

// A shared cache of 1000 pieces fills at once; the pieces it cannot take go to the per-thread caches
// (each of 65536 entries, cleared when full). Brown (55k distinct pieces) and then 90k distinct
// random words on four threads give the ids of one thread with a default-sized cache, and of plain BPE.
TEST(GPT2BPE, FullSharedCacheFallsBackToThreadCaches) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  auto texts = brown_texts(brown);
  texts.resize(150);
  std::unique_ptr<ByteLevelBPE> bpe = gpt2_model(vocab);
  auto encode = [&](const ByteLevelBPE& model, const std::string& text, std::vector<int32_t>& out) {
    model.encode_text(PretokenizerPattern::Gpt2, reinterpret_cast<const uint8_t*>(text.data()), text.size(), out);
  };
  std::vector<std::vector<int32_t>> serial(texts.size());
  for (size_t d = 0; d < texts.size(); ++d) encode(*bpe, texts[d], serial[d]);
  EXPECT_GT(bpe->shared_cache_entries(), 1000u);  // the default cache took them all

  std::unique_ptr<ByteLevelBPE> small = gpt2_model(vocab);
  small->set_shared_cache_capacity(1000);
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<int32_t>>> got(kThreads, std::vector<std::vector<int32_t>>(texts.size()));
  on_threads(kThreads, texts.size(), [&](int t, size_t d) { encode(*small, texts[d], got[t][d]); });
  EXPECT_EQ(small->shared_cache_entries(), 1000u);
  for (int t = 0; t < kThreads; ++t)
    for (size_t d = 0; d < texts.size(); ++d) ASSERT_EQ(got[t][d], serial[d]) << "thread " << t << ", document " << d;

  // 90k distinct words: more than a per-thread cache holds, so each thread's also fills and clears.
  const std::vector<std::string> words = distinct_words(90000, 11);
  const std::vector<std::vector<int32_t>> want = plain_bpe(*bpe, words);
  std::vector<size_t> bad(kThreads, 0);
  on_threads(kThreads, words.size(), [&](int t, size_t i) {
    std::vector<int32_t> ids;
    encode(*small, words[i], ids);
    if (ids != want[i]) ++bad[t];
  });
  EXPECT_EQ(bad, std::vector<size_t>(kThreads, 0));
}

TEST(GPT2BPE, VocabularyEodAndAddedTokens) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  GPT2BPETokenizer tok(gpt2_spec(vocab));
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eod(), 50256);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok.token_to_id("\xC4\xA0the"), 262);  // "Ġthe"
  EXPECT_EQ(tok.token_to_id("no such token"), -1);
  EXPECT_EQ(tok.add_special_token("<|endoftext|>"), 50256);
  EXPECT_EQ(tok.add_special_token("<|mask|>"), 50257);
  EXPECT_EQ(tok.add_special_token("<|mask|>"), 50257);
  EXPECT_EQ(tok.vocab_size(), 50258);
  EXPECT_EQ(tok.token_to_id("<|mask|>"), 50257);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{15496, 50257, 50256}), "Hello<|mask|><|endoftext|>");
  EXPECT_EQ(tok.spec().added_special_tokens, std::vector<std::string>{"<|mask|>"});
  // The text "<|endoftext|>" is plain text for GPT2BPETokenizer (as in Megatron).
  EXPECT_NE(tok.encode("<|endoftext|>"), std::vector<int32_t>{50256});
  expect_error([&] { tok.decode(std::vector<int32_t>{50258}); }, {"50258"});
  expect_error([&] { tok.decode(std::vector<int32_t>{-1}); }, {"-1"});
  // The spec rebuilds the same tokenizer, added tokens included.
  auto again = make_tokenizer(TokenizerSpec::from_json(tok.spec().to_json()));
  EXPECT_EQ(again->vocab_size(), 50258);
  EXPECT_EQ(again->token_to_id("<|mask|>"), 50257);
}

TEST(GPT2BPE, MalformedFilesNameTheFile) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  const TokenizerSpec good = gpt2_spec(vocab);
  TempFile bad_json("vocab_bad.json", "{\"a\": 1, ");
  TempFile bad_merges("merges_bad.txt", "#version: 0.2\n\xC4\xA0 t\nonlyone\n");
  TempFile empty_merges("merges_empty.txt", "#version: 0.2\n");
  TempFile small_vocab("vocab_small.json", "{\"a\": 0, \"b\": 1}");
  TokenizerSpec s = good;
  s.vocab_file = bad_json.path;
  expect_error([&] { GPT2BPETokenizer t(s); }, {bad_json.path, "not valid JSON"});
  s = good;
  s.merge_file = bad_merges.path;
  expect_error([&] { GPT2BPETokenizer t(s); }, {bad_merges.path, "line 3", "onlyone"});
  s.merge_file = empty_merges.path;
  expect_error([&] { GPT2BPETokenizer t(s); }, {empty_merges.path, "no merges"});
  s = good;
  s.vocab_file = small_vocab.path;  // truncated: no byte tokens, merges name unknown tokens
  expect_error([&] { GPT2BPETokenizer t(s); }, {small_vocab.path, "byte"});
  s = good;
  s.vocab_file = "/nonexistent/vocab.json";
  expect_error([&] { GPT2BPETokenizer t(s); }, {"/nonexistent/vocab.json", "cannot open"});
}

// ---- vocab.json hand parser ------------------------------------------------------------------------

namespace {

// (key, id) pairs as nlohmann::json reads `text`, sorted; nullopt-like false when it rejects it.
bool nlohmann_vocab(const std::string& text, std::vector<std::pair<std::string, int64_t>>& out) {
  out.clear();
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    return false;
  }
  if (!j.is_object()) return false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer()) return false;
    out.emplace_back(it.key(), it.value().get<int64_t>());
  }
  std::sort(out.begin(), out.end());
  return true;
}

bool fast_vocab(const std::string& text, std::vector<std::pair<std::string, int64_t>>& out) {
  out.clear();
  std::vector<std::pair<std::string_view, int32_t>> v;
  std::string storage;
  if (!parse_flat_vocab_json(text, v, storage)) return false;
  for (const auto& [k, id] : v) out.emplace_back(std::string(k), id);
  std::sort(out.begin(), out.end());
  return true;
}

// A JSON string literal for `s` (valid UTF-8), each character written raw or escaped at random:
// short escapes, \uXXXX, surrogate pairs above U+FFFF, upper- or lower-case hex.
std::string random_json_literal(const std::string& s, std::mt19937_64& rng) {
  std::string out = "\"";
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const int len = unicode::decode_utf8(p + i, s.size() - i, &cp);
    const bool must = cp < 0x20 || cp == '"' || cp == '\\';
    char buf[16];
    const char* hex = (rng() & 1) ? "\\u%04x" : "\\u%04X";
    if (!must && rng() % 3 != 0) {
      out.append(s, i, len);
    } else if (cp == '"' || cp == '\\' || cp == '/' || cp == '\n' || cp == '\t' || cp == '\b' || cp == '\f' ||
               cp == '\r') {
      const char* shorts = "\"\\/\n\t\b\f\r";
      const char* names = "\"\\/ntbfr";
      out += '\\';
      out += names[std::strchr(shorts, static_cast<int>(cp)) - shorts];
    } else if (cp >= 0x10000) {
      std::snprintf(buf, sizeof buf, hex, 0xD800 + ((cp - 0x10000) >> 10));
      out += buf;
      std::snprintf(buf, sizeof buf, hex, 0xDC00 + ((cp - 0x10000) & 0x3FF));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, hex, cp);
      out += buf;
    }
    i += len;
  }
  return out + "\"";
}

}  // namespace

// Random flat objects (keys with every kind of character and escape, ids over the whole int32 range,
// random JSON whitespace) read the same as with nlohmann::json.
TEST(VocabJson, HandParserReadsWhatNlohmannReads) {
  std::mt19937_64 rng(7);
  const uint32_t pool[] = {'a', 'Z', '0', ' ', '"', '\\', '/', '\n', '\t', 0x01, 0x1F, 0x7F, 0xE9, 0x120, 0x7FF,
                           0x800, 0x4E2D, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF, '<', '|', '\'', 'e'};
  const char* spaces[] = {"", " ", "\n", "\t", "\r\n  "};
  auto ws = [&] { return std::string(spaces[rng() % 5]); };
  for (int trial = 0; trial < 300; ++trial) {
    std::set<std::string> keys;
    const size_t n = rng() % 40;
    while (keys.size() < n) {
      std::string k;
      for (size_t len = rng() % 6; len > 0; --len) unicode::append_utf8(pool[rng() % std::size(pool)], k);
      keys.insert(k);
    }
    std::string text = ws() + "{";
    bool first = true;
    for (const std::string& k : keys) {
      const int64_t r = static_cast<int64_t>(rng() % 5);
      const int64_t id = r == 0 ? INT32_MAX : r == 1 ? INT32_MIN : r == 2 ? 0 : static_cast<int32_t>(rng());
      text += (first ? "" : ",") + ws() + random_json_literal(k, rng) + ws() + ":" + ws() + std::to_string(id) + ws();
      first = false;
    }
    text += "}" + ws();
    std::vector<std::pair<std::string, int64_t>> a, b;
    ASSERT_TRUE(nlohmann_vocab(text, a)) << text;
    ASSERT_TRUE(fast_vocab(text, b)) << text;
    ASSERT_EQ(a, b) << text;
  }
  std::vector<std::pair<std::string, int64_t>> v;
  ASSERT_TRUE(fast_vocab(" { \"a\" : -0 , \"\\u00e9\\/\" : 2147483647 }\n", v));
  EXPECT_EQ(v, (std::vector<std::pair<std::string, int64_t>>{{"a", 0}, {"\xC3\xA9/", INT32_MAX}}));
  ASSERT_TRUE(fast_vocab("{}", v));
  EXPECT_TRUE(v.empty());
}

// Outside the plain subset the hand parser declines (the caller then uses nlohmann::json), and on
// mutated input it never accepts what nlohmann::json reads differently or rejects.
TEST(VocabJson, HandParserDeclinesAnythingElse) {
  const std::string declined[] = {
      "",  "{",  "{\"a\": 1",  "{\"a",  "{\"a\" 1}",  "{\"a\": 1,}",  "{\"a\": 1} x",  "[1]",  "{\"a\": 1.5}",
      "{\"a\": 1e3}",  "{\"a\": 1E3}",  "{\"a\": \"x\"}",  "{\"a\": [1]}",  "{\"a\": null}",  "{\"a\": 01}",
      "{\"a\": -}",  "{\"a\": 2147483648}",  "{\"a\": -2147483649}",  "{\"a\": 99999999999}",
      "\xEF\xBB\xBF{\"a\": 1}",  "{\"\\ud800\": 1}",  "{\"\\udc00\": 1}",  "{\"\\ud800\\u0041\": 1}",
      "{\"a\x01\": 1}",  "{\"\xFF\": 1}",  "{\"\xED\xA0\x80\": 1}",  "{\"\\x\": 1}",  "{\"\\u12G4\": 1}",
      "{a: 1}",  "{\"a\": +1}"};
  std::vector<std::pair<std::string, int64_t>> v;
  for (const std::string& t : declined) EXPECT_FALSE(fast_vocab(t, v)) << json(t).dump();

  std::mt19937_64 rng(11);
  const std::string base = "{\"a\\u0120\": 1, \"\\\"q\\\\\": -20, \"\xC3\xA9t\xC3\xA9\": 300, \"\\ud83d\\ude00\": 4}";
  const std::string alphabet = "{}[]\":,.-+eE0123456789 \\/u\x01\xC3\xA9";
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string t = base;
    for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
      const size_t at = rng() % (t.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: if (at < t.size()) t.erase(at, 1); break;
        case 1: t.insert(at, 1, c); break;
        default: if (at < t.size()) t[at] = c; break;
      }
    }
    std::vector<std::pair<std::string, int64_t>> a, b;
    if (!fast_vocab(t, b)) continue;
    ++accepted;
    std::set<std::string> distinct;
    for (const auto& e : b) distinct.insert(e.first);
    if (distinct.size() != b.size()) continue;  // duplicates: the caller rejects them
    ASSERT_TRUE(nlohmann_vocab(t, a)) << json(t).dump();
    ASSERT_EQ(a, b) << json(t).dump();
  }
  EXPECT_GT(accepted, 100);  // the mutations do reach the accepting paths
}

// The released GPT-2 vocabulary takes the fast path and gives nlohmann's map; a key given twice makes
// GPT2BPETokenizer fail naming it (nlohmann::json would silently keep the last).
TEST(VocabJson, Gpt2VocabFastPathAndDuplicateKeys) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  const std::string text = read_tokenizer_file(vocab, "vocab");
  std::vector<std::pair<std::string, int64_t>> a, b;
  ASSERT_TRUE(fast_vocab(text, b));
  ASSERT_TRUE(nlohmann_vocab(text, a));
  EXPECT_EQ(b.size(), 50257u);
  EXPECT_EQ(a, b);
  TempFile dup("vocab_dup.json", "{\"\\u0120the\": 50257, " + text.substr(text.find('{') + 1));
  TokenizerSpec s = gpt2_spec(vocab);
  s.vocab_file = dup.path;
  expect_error([&] { GPT2BPETokenizer t(s); }, {dup.path, "\xC4\xA0the", "given twice"});
}

// ---- HuggingFace tokenizer.json ----------------------------------------------------------------------

TEST(HuggingFace, FixturesGiveTheIdsOfTokenizers) {
  const auto cases = read_jsonl(fixture("hf_expected.jsonl"));
  ASSERT_GE(cases.size(), 150u);
  std::map<std::string, std::unique_ptr<Tokenizer>> toks;
  for (const json& c : cases) {
    const std::string name = c["tokenizer"], text = c["text"];
    auto& tok = toks[name];
    if (!tok) tok = make_tokenizer(hf_spec(fixture(name)));
    const std::vector<int32_t> ids = tok->encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << name << ", text: " << json(text).dump();
    // Decoding gives the text back, except that lstrip/rstrip tokens swallow their whitespace,
    // add_prefix_space adds a space, and the Qwen2 fixture's normalizer gives NFC text.
    if (text.find("<mask>") == std::string::npos && text.find("[R]") == std::string::npos &&
        name != "hf_prefix_small.json") {
      const std::string want = name == "hf_qwen2_small.json" ? unicode::to_nfc(text) : text;
      EXPECT_EQ(tok->decode(ids), want) << name << ", text: " << json(text).dump();
    }
  }
  EXPECT_EQ(toks.size(), 5u);
  // Without an end-of-document token in the file one is appended past its vocabulary, for the
  // data pipeline only: the text "<|endoftext|>" stays ordinary text (checked by the ids above).
  const Tokenizer& no_eod = *toks["hf_no_eod_small.json"];
  EXPECT_EQ(no_eod.eod(), 856);
  EXPECT_EQ(no_eod.vocab_size(), 857);
  const Tokenizer& llama = *toks["hf_llama3_small.json"];
  EXPECT_EQ(llama.vocab_size(), 862);
  EXPECT_EQ(llama.eod(), llama.token_to_id("<|endoftext|>"));  // the fixture kept GPT-2's, first choice
  const Tokenizer& prefix = *toks["hf_prefix_small.json"];
  EXPECT_EQ(prefix.decode(prefix.encode("Hello<|endoftext|>world")), " Hello<|endoftext|> world");
  EXPECT_EQ(toks["hf_gpt2_small.json"]->eod(), toks["hf_gpt2_small.json"]->token_to_id("<|endoftext|>"));
}

// The GPT-2 files as a tokenizer.json (written here as `tokenizers` writes them) give exactly what
// GPT2BPETokenizer gives.
TEST(HuggingFace, Gpt2AsTokenizerJsonMatchesGpt2Tokenizer) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  const TokenizerSpec spec = gpt2_spec(vocab);
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", json::parse(read_tokenizer_file(spec.vocab_file, "vocab"))}};
  json merges = json::array();
  std::ifstream mf(spec.merge_file);
  std::string line;
  std::getline(mf, line);
  while (std::getline(mf, line))
    if (!line.empty()) merges.push_back(line);
  j["model"]["merges"] = merges;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}});
  HuggingFaceTokenizer hf(j, "gpt2-as-tokenizer.json");
  const GPT2BPETokenizer& gpt2 = shared_gpt2(vocab);
  EXPECT_EQ(hf.vocab_size(), 50257);
  EXPECT_EQ(hf.eod(), 50256);
  auto texts = brown_texts(brown);
  texts.resize(40);
  for (const json& c : read_jsonl(fixture("gpt2_expected.jsonl"))) texts.push_back(c["text"]);
  for (const std::string& t : texts) {
    if (t.find("<|endoftext|>") != std::string::npos) continue;  // a special only for the HF tokenizer
    ASSERT_EQ(hf.encode(t), gpt2.encode(t)) << json(t).dump();
  }
  EXPECT_EQ(hf.encode("a<|endoftext|>b"), (std::vector<int32_t>{64, 50256, 65}));
}

TEST(HuggingFace, AddSpecialTokenIsSplitOutOfText) {
  auto tok = make_tokenizer(hf_spec(fixture("hf_gpt2_small.json")));
  const int64_t v = tok->vocab_size();
  const int32_t mask = tok->add_special_token("<|mask|>");
  EXPECT_EQ(mask, v);
  EXPECT_EQ(tok->vocab_size(), v + 1);
  const auto ids = tok->encode("a<|mask|>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], mask);
  EXPECT_EQ(tok->decode(ids), "a<|mask|>b");
  EXPECT_EQ(tok->add_special_token("<|endoftext|>"), tok->eod());  // existing: same id, not a new one
  EXPECT_EQ(tok->spec().added_special_tokens, (std::vector<std::string>{"<|mask|>", "<|endoftext|>"}));
  auto again = make_tokenizer(tok->spec());
  EXPECT_EQ(again->encode("a<|mask|>b"), ids);
}

TEST(HuggingFace, TrainerOutputGivesTheIdsOfTokenizers) {
  auto tok = make_tokenizer(hf_spec(fixture("trained_tokenizer.json")));
  EXPECT_EQ(tok->vocab_size(), 700);
  EXPECT_EQ(tok->eod(), 0);
  EXPECT_EQ(tok->token_to_id("<|mask|>"), 1);
  const auto cases = read_jsonl(fixture("trained_expected.jsonl"));
  ASSERT_GE(cases.size(), 40u);
  for (const json& c : cases) {
    const std::string text = c["text"];
    const auto ids = tok->encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << json(text).dump();
    EXPECT_EQ(tok->decode(ids), text);
  }
}

// Training again on the committed corpus writes the committed tokenizer.json (whose ids
// `tokenizers` checked above; the script also checked it equals `tokenizers`' own trainer output).
TEST(HuggingFace, TrainerReproducesItsFixture) {
  ByteLevelBpeTrainer trainer;
  for (const json& j : read_jsonl(fixture("tiny_corpus.jsonl"))) trainer.add_text(j["text"].get<std::string>());
  BpeTrainerOptions opt;
  opt.vocab_size = 700;
  opt.special_tokens = {"<|endoftext|>", "<|mask|>"};
  opt.min_frequency = 2;
  const nlohmann::ordered_json trained = trainer.train(opt);
  const auto committed =
      nlohmann::ordered_json::parse(read_tokenizer_file(fixture("trained_tokenizer.json"), "fixture"));
  EXPECT_EQ(trained["model"]["vocab"], committed["model"]["vocab"]);
  EXPECT_EQ(trained["model"]["merges"], committed["model"]["merges"]);
  EXPECT_EQ(trained, committed);
  // A vocabulary smaller than specials + bytes gets no merges at all.
  opt.vocab_size = 100;
  EXPECT_EQ(trainer.train(opt)["model"]["merges"].size(), 0u);
}

TEST(HuggingFace, MalformedFilesNameTheFileAndField) {
  const json good = json::parse(read_tokenizer_file(fixture("hf_gpt2_small.json"), "fixture"));
  auto load = [](const std::string& name, const std::string& content) {
    TempFile f(name, content);
    HuggingFaceTokenizer t(hf_spec(f.path));
  };
  auto with = [&](auto edit) {
    json j = good;
    edit(j);
    return j.dump();
  };
  expect_error([&] { load("bad.json", good.dump().substr(0, 500)); }, {"bad.json", "not valid JSON"});
  expect_error([&] { load("nomerges.json", with([](json& j) { j["model"].erase("merges"); })); },
               {"nomerges.json", "model.merges"});
  expect_error([&] { load("novocab.json", with([](json& j) { j["model"].erase("vocab"); })); },
               {"novocab.json", "model.vocab"});
  // Truncated vocabulary: a token a merge needs is gone.
  expect_error([&] { load("truncvocab.json", with([](json& j) { j["model"]["vocab"].erase("\xC4\xA0t"); })); },
               {"truncvocab.json", "merge", "\xC4\xA0t"});
  // Truncated vocabulary: a byte token is gone.
  expect_error([&] { load("nobyte.json", with([](json& j) { j["model"]["vocab"].erase("\xC4\x80"); })); },
               {"nobyte.json", "byte 0"});
  expect_error([&] { load("wordpiece.json", with([](json& j) { j["model"]["type"] = "WordPiece"; })); },
               {"wordpiece.json", "model.type", "WordPiece"});
  expect_error([&] { load("nfkc.json", with([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; })); },
               {"nfkc.json", "normalizer", "NFKC"});
  expect_error([&] { load("dropout.json", with([](json& j) { j["model"]["dropout"] = 0.1; })); },
               {"dropout.json", "dropout"});
  expect_error(
      [&] {
        load("regex.json", with([](json& j) {
               j["pre_tokenizer"] = json::parse(R"({"type":"Sequence","pretokenizers":[
                 {"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false},
                 {"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})");
             }));
      },
      {"regex.json", "pre_tokenizer", "\\w+"});
  expect_error([&] { load("digits.json", with([](json& j) { j["pre_tokenizer"] = {{"type", "Digits"}}; })); },
               {"digits.json", "pre_tokenizer", "Digits"});
  expect_error([&] { load("decoder.json", with([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; })); },
               {"decoder.json", "decoder", "WordPiece"});
  expect_error([&] { load("dupid.json", with([](json& j) { j["model"]["vocab"]["zzz"] = 5; })); },
               {"dupid.json", "id 5"});
  expect_error([&] { load("sw.json", with([](json& j) { j["added_tokens"][0]["single_word"] = true; })); },
               {"sw.json", "added_tokens[0]", "single_word"});
  expect_error([&] { HuggingFaceTokenizer t(hf_spec("/nonexistent/tokenizer.json")); },
               {"/nonexistent/tokenizer.json", "cannot open"});
}

// ---- SentencePiece -----------------------------------------------------------------------------------

TEST(SentencePiece, GivesTheIdsOfSentencepiece) {
  TokenizerSpec s;
  s.type = "SentencePieceTokenizer";
  s.tokenizer_model = fixture("tiny_sp.model");
#ifndef MEGADLM_HAVE_SENTENCEPIECE
  expect_error([&] { make_tokenizer(s); }, {"SentencePiece"});
  GTEST_SKIP() << "built without libsentencepiece";
#else
  auto tok = make_tokenizer(s);
  EXPECT_EQ(tok->vocab_size(), 600);
  EXPECT_EQ(tok->eod(), 2);  // </s>
  EXPECT_EQ(tok->token_to_id("</s>"), 2);
  const auto cases = read_jsonl(fixture("tiny_sp_expected.jsonl"));
  ASSERT_GE(cases.size(), 40u);
  for (const json& c : cases) {
    const std::string text = c["text"];
    const auto ids = tok->encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << json(text).dump();
    EXPECT_EQ(tok->decode(ids), c["decoded"].get<std::string>()) << json(text).dump();
  }
  EXPECT_EQ(tok->add_special_token("<|mask|>"), 600);
  EXPECT_EQ(tok->decode(std::vector<int32_t>{600}), "<|mask|>");
  s.type = "Llama2Tokenizer";
  s.added_special_tokens = {"<|mask|>"};
  auto llama = make_tokenizer(s);
  EXPECT_EQ(llama->token_to_id("<|mask|>"), 600);
  TempFile junk("junk.model", "not a model");
  s.tokenizer_model = junk.path;
  expect_error([&] { make_tokenizer(s); }, {junk.path});
#endif
}

// ---- Null and Byte tokenizers, specs, factory --------------------------------------------------------

TEST(NullTokenizer, IdsAsDecimalText) {
  TokenizerSpec s;
  s.type = "NullTokenizer";
  s.null_vocab_size = 1000;
  auto tok = make_tokenizer(s);
  EXPECT_EQ(tok->vocab_size(), 1001);  // as Megatron: N ids plus eod = N
  EXPECT_EQ(tok->eod(), 1000);
  EXPECT_EQ(tok->encode("1 2  3\n999 1000"), (std::vector<int32_t>{1, 2, 3, 999, 1000}));
  EXPECT_TRUE(tok->encode("").empty());
  EXPECT_EQ(tok->decode(std::vector<int32_t>{5, 0, 17}), "5 0 17");
  EXPECT_EQ(tok->token_to_id("42"), 42);
  EXPECT_EQ(tok->token_to_id("x"), -1);
  expect_error([&] { tok->encode("1 two 3"); }, {"'two'"});
  expect_error([&] { tok->encode("1001"); }, {"'1001'"});
  expect_error([&] { tok->encode("-1"); }, {"'-1'"});
  EXPECT_EQ(tok->add_special_token("<|mask|>"), 1001);
  EXPECT_EQ(tok->vocab_size(), 1002);
  s.null_vocab_size = 0;
  expect_error([&] { make_tokenizer(s); }, {"--vocab-size"});
}

TEST(ByteTokenizer, BytesAndSpecials) {
  TokenizerSpec s;
  s.type = "ByteTokenizer";
  auto tok = make_tokenizer(s);
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->eod(), 256);
  const std::string text("h\xC3\xA9\xFF\0!", 6);
  EXPECT_EQ(tok->encode(text), (std::vector<int32_t>{'h', 0xC3, 0xA9, 0xFF, 0, '!'}));
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 256);
  EXPECT_EQ(tok->add_special_token("<|mask|>"), 257);
  EXPECT_EQ(tok->decode(std::vector<int32_t>{104, 257, 256}), "h<|mask|><|endoftext|>");
  expect_error([&] { tok->decode(std::vector<int32_t>{258}); }, {"258"});
}

TEST(TokenizerSpec, JsonRoundTripAndErrors) {
  TokenizerSpec s;
  s.type = "GPT2BPETokenizer";
  s.vocab_file = "v.json";
  s.merge_file = "m.txt";
  s.added_special_tokens = {"<|mask|>", "<x>"};
  const TokenizerSpec r = TokenizerSpec::from_json(s.to_json());
  EXPECT_EQ(r.type, s.type);
  EXPECT_EQ(r.vocab_file, s.vocab_file);
  EXPECT_EQ(r.merge_file, s.merge_file);
  EXPECT_EQ(r.added_special_tokens, s.added_special_tokens);
  expect_error([] { TokenizerSpec::from_json(json{{"vocab_file", "v"}}); }, {"'type'"});
  expect_error([] { TokenizerSpec::from_json(json{{"type", "GPT2BPETokenizer"}, {"vocab_file", "v"}}); },
               {"'merge_file'"});
  expect_error([] { TokenizerSpec::from_json(json{{"type", "HuggingFaceTokenizer"}}); }, {"'tokenizer_model'"});
  expect_error([] { TokenizerSpec::from_json(json{{"type", "NullTokenizer"}}); }, {"'null_vocab_size'"});
  expect_error([] { TokenizerSpec::from_json(json{{"type", "NullTokenizer"}, {"null_vocab_size", "12"}}); },
               {"'null_vocab_size'", "integer"});
  expect_error([] { TokenizerSpec::from_json(json{{"type", "Bogus"}}); }, {"Bogus", "GPT2BPETokenizer"});
  expect_error([] { TokenizerSpec::from_json(json::array()); }, {"object"});
  TokenizerSpec bogus;
  bogus.type = "WordPieceTokenizer";
  expect_error([&] { make_tokenizer(bogus); }, {"WordPieceTokenizer"});
}

TEST(Tokenizer, FactoryBuildsEveryTypeWithAddedTokens) {
  std::vector<TokenizerSpec> specs;
  if (const std::string v = test::shared_path("tokenizers/gpt2/vocab.json"); !v.empty()) specs.push_back(gpt2_spec(v));
  specs.push_back(hf_spec(fixture("hf_llama3_small.json")));
  TokenizerSpec n;
  n.type = "NullTokenizer";
  n.null_vocab_size = 50;
  specs.push_back(n);
  TokenizerSpec b;
  b.type = "ByteTokenizer";
  specs.push_back(b);
#ifdef MEGADLM_HAVE_SENTENCEPIECE
  TokenizerSpec sp;
  sp.type = "SentencePieceTokenizer";
  sp.tokenizer_model = fixture("tiny_sp.model");
  specs.push_back(sp);
#endif
  for (TokenizerSpec s : specs) {
    s.added_special_tokens = {"<|mask|>", "<|pad|>"};
    auto tok = make_tokenizer(s);
    const int32_t mask = tok->token_to_id("<|mask|>"), pad = tok->token_to_id("<|pad|>");
    EXPECT_GE(mask, 0) << s.type;
    EXPECT_EQ(pad, mask + 1) << s.type;
    EXPECT_EQ(tok->vocab_size(), pad + 1) << s.type;
    EXPECT_GE(tok->eod(), 0) << s.type;
    EXPECT_LT(tok->eod(), tok->vocab_size()) << s.type;
    EXPECT_EQ(tok->spec().type, s.type);
    EXPECT_EQ(tok->spec().added_special_tokens, s.added_special_tokens) << s.type;
    EXPECT_EQ(tok->add_special_token("<|mask|>"), mask) << s.type;
    if (s.type != "NullTokenizer") {  // which writes ids as numbers
      EXPECT_EQ(tok->decode(std::vector<int32_t>{mask}), "<|mask|>") << s.type;
    }
  }
}
