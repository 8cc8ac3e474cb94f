// The WordPiece tokenizer (--tokenizer-type BertWordPieceLowerCase / BertWordPieceCase) against the ids
// and decoded text of HuggingFace's BertTokenizerFast (fixtures written by
// tools/reference/wordpiece_fixture.py), its vocab.txt errors, and preprocess_data with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/wordpiece.h"
#include "tokenizers/tokenizer_fixtures.h"

using namespace megadlm;
using json = nlohmann::json;

namespace {

std::string fixture(const std::string& name) { return test::tokenizer_fixture(name); }
using test::read_jsonl;

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// FNV-1a 64 of bytes, as the fixture script computes it.
uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}
std::string ids_fnv(const std::vector<int32_t>& ids) { return hex64(fnv1a64(ids.data(), ids.size() * 4)); }
std::string text_fnv(const std::string& s) { return hex64(fnv1a64(s.data(), s.size())); }

TokenizerSpec wordpiece_spec(bool lower, const std::string& vocab = fixture("wordpiece_vocab.txt")) {
  TokenizerSpec s;
  s.type = lower ? "BertWordPieceLowerCase" : "BertWordPieceCase";
  s.vocab_file = vocab;
  return s;
}

const WordPieceTokenizer& shared_wordpiece(bool lower) {
  static const WordPieceTokenizer uncased(wordpiece_spec(true)), cased(wordpiece_spec(false));
  return lower ? uncased : cased;
}

std::vector<json> expected_cases(const std::string& mode, bool documents) {
  std::vector<json> out;
  for (json& j : read_jsonl(fixture("wordpiece_expected.jsonl")))
    if (j.at("mode") == mode && j.contains("doc") == documents) out.push_back(std::move(j));
  return out;
}

void expect_hard_strings(bool lower) {
  const WordPieceTokenizer& tok = shared_wordpiece(lower);
  const auto cases = expected_cases(lower ? "uncased" : "cased", false);
  ASSERT_GT(cases.size(), 140u);
  for (const json& c : cases) {
    const std::string text = c.at("text");
    const auto ids = tok.encode(text);
    EXPECT_EQ(ids, c.at("ids").get<std::vector<int32_t>>()) << json(text).dump();
    EXPECT_EQ(tok.decode(ids), c.at("decoded").get<std::string>()) << json(text).dump();
  }
}

void expect_brown(bool lower, const std::string& brown) {
  const WordPieceTokenizer& tok = shared_wordpiece(lower);
  const auto docs = read_jsonl(brown);
  const auto cases = expected_cases(lower ? "uncased" : "cased", true);
  ASSERT_EQ(docs.size(), cases.size());
  for (size_t d = 0; d < docs.size(); ++d) {
    const std::string text = docs[d].at("text");
    const json& c = cases[d];
    ASSERT_EQ(static_cast<int64_t>(text.size()), c.at("bytes").get<int64_t>()) << "document " << d;
    const auto ids = tok.encode(text);
    if (c.contains("ids")) {
      ASSERT_EQ(ids, c.at("ids").get<std::vector<int32_t>>()) << "document " << d;
    }
    ASSERT_EQ(static_cast<int64_t>(ids.size()), c.at("n_ids").get<int64_t>()) << "document " << d;
    ASSERT_EQ(ids_fnv(ids), c.at("fnv1a64").get<std::string>()) << "document " << d;
    ASSERT_EQ(text_fnv(tok.decode(ids)), c.at("decoded_fnv1a64").get<std::string>()) << "document " << d;
  }
}

// A vocab.txt with the given content in a fresh directory; returns its path.
std::string write_vocab(const test::TempDir& dir, const std::string& content) {
  const std::string path = dir / "vocab.txt";
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

const char* kGoodVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\ncat\n";

// The Error loading `content` raises; it must name the file.
std::string vocab_error(const test::TempDir& dir, const std::string& content) {
  const std::string path = write_vocab(dir, content);
  const std::string e = test::error_of([&] { WordPieceTokenizer tok(wordpiece_spec(true, path)); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  return e;
}

}  // namespace

TEST(WordPiece, UncasedHardStringsMatchBertTokenizerFast) { expect_hard_strings(true); }
TEST(WordPiece, CasedHardStringsMatchBertTokenizerFast) { expect_hard_strings(false); }

TEST(WordPiece, UncasedBrownMatchesBertTokenizerFast) {
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  expect_brown(true, brown);
}

TEST(WordPiece, CasedBrownMatchesBertTokenizerFast) {
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  expect_brown(false, brown);
}

// Megatron's ids by name, eod = [SEP]; the factory builds the tokenizer from the spec's JSON form.
TEST(WordPiece, SpecialIdsAndFactory) {
  const TokenizerSpec spec = TokenizerSpec::from_json(wordpiece_spec(true).to_json());
  const auto tok = make_tokenizer(spec);
  const auto& wp = dynamic_cast<const WordPieceTokenizer&>(*tok);
  EXPECT_EQ(wp.pad(), 0);
  EXPECT_EQ(wp.unk(), 1);
  EXPECT_EQ(wp.cls(), 2);
  EXPECT_EQ(wp.sep(), 3);
  EXPECT_EQ(wp.mask(), 4);
  EXPECT_EQ(tok->eod(), wp.sep());
  EXPECT_EQ(tok->vocab_size(), 6000);
  EXPECT_TRUE(wp.lower_case());
  EXPECT_FALSE(shared_wordpiece(false).lower_case());
  json no_vocab = wordpiece_spec(false).to_json();
  no_vocab.erase("vocab_file");
  EXPECT_NE(test::error_of([&] { TokenizerSpec::from_json(no_vocab); }).find("vocab_file"), std::string::npos);
}

TEST(WordPiece, AddedSpecialTokenIsSplitFromText) {
  WordPieceTokenizer tok(wordpiece_spec(true));
  const int32_t id = tok.add_special_token("<extra_id_0>");
  EXPECT_EQ(id, 6000);
  EXPECT_EQ(tok.vocab_size(), 6001);
  const auto ids = tok.encode("the<extra_id_0>cat");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], id);
  EXPECT_EQ(tok.decode(ids), "the <extra_id_0> cat");
}

// Plain lower-case text whose words are all in the vocabulary decodes back to itself, in both modes.
TEST(WordPiece, DecodeRoundTripsPlainText) {
  const std::string text = "the jury said it was not a good idea, and the city agreed. did they go?";
  for (bool lower : {true, false}) {
    const WordPieceTokenizer& tok = shared_wordpiece(lower);
    const auto ids = tok.encode(text);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.unk()), 0);
    EXPECT_EQ(tok.decode(ids), text);
  }
  EXPECT_NE(test::error_of([] { shared_wordpiece(true).decode(std::vector<int32_t>{6000}); }).find("outside the vocabulary"),
            std::string::npos);
}

TEST(WordPiece, MalformedVocabErrorsNameFileAndLine) {
  test::TempDir dir;
  EXPECT_NE(vocab_error(dir, "").find("is empty"), std::string::npos);
  EXPECT_NE(vocab_error(dir, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nthe\n").find("line 8: token 'the' repeats line 6"),
            std::string::npos);
  EXPECT_NE(vocab_error(dir, "[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n").find("line 3 is empty"), std::string::npos);
  EXPECT_NE(vocab_error(dir, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nca\xff\n").find("line 6 is not valid UTF-8"),
            std::string::npos);
  EXPECT_NE(vocab_error(dir, "[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n").find("has no [UNK] token"), std::string::npos);
  EXPECT_NE(vocab_error(dir, "[PAD]\n[UNK]\n[CLS]\n[MASK]\nthe\n").find("has no [SEP] token"), std::string::npos);
  const std::string missing = dir / "absent.txt";
  EXPECT_NE(test::error_of([&] { WordPieceTokenizer tok(wordpiece_spec(true, missing)); }).find(missing),
            std::string::npos);
}

// The file's last line may lack its newline, and CRLF line ends lose their '\r' (`tokenizers` trims
// the end of each line).
TEST(WordPiece, VocabLineEndings) {
  test::TempDir dir;
  WordPieceTokenizer no_newline(wordpiece_spec(true, write_vocab(dir, std::string(kGoodVocab) + "cats")));
  EXPECT_EQ(no_newline.encode("The cats"), (std::vector<int32_t>{5, 8}));
  WordPieceTokenizer crlf(wordpiece_spec(true, write_vocab(dir, "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nthe\r\n##s\r\ncat\r\n")));
  EXPECT_EQ(crlf.encode("The cats"), (std::vector<int32_t>{5, 7, 6}));
}

TEST(WordPiece, PreprocessDataEndToEnd) {
  MEGADLM_REQUIRE_BINARY("preprocess_data");
  test::TempDir dir;
  std::ofstream(dir / "in.jsonl") << "{\"text\": \"The cat sat.\"}\n{\"text\": \"Caf\\u00e9 \\u4e2d!\"}\n";
  const std::string vocab = fixture("wordpiece_vocab.txt");
  const test::ChildResult r = test::run_binary(
      "preprocess_data",
      {"--input", dir / "in.jsonl", "--output-prefix", dir / "out", "--tokenizer-type", "BertWordPieceLowerCase",
       "--vocab-file", vocab, "--append-eod"},
      dir / "preprocess.log");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  const WordPieceTokenizer& tok = shared_wordpiece(true);
  const IndexedDataset d(dir / "out_text_document");
  ASSERT_EQ(d.num_documents(), 2);
  std::vector<int32_t> first = tok.encode("The cat sat."), second = tok.encode("Caf\xc3\xa9 \xe4\xb8\xad!");
  first.push_back(tok.sep());
  second.push_back(tok.sep());
  EXPECT_EQ(d.get(0), first);
  EXPECT_EQ(d.get(1), second);
  const test::ChildResult bad = test::run_binary(
      "preprocess_data",
      {"--input", dir / "in.jsonl", "--output-prefix", dir / "bad", "--tokenizer-type", "BertWordPieceCase",
       "--vocab-file", dir / "in.jsonl"},
      dir / "bad.log");
  EXPECT_CLEAN_ERROR_EXIT(bad);
  EXPECT_NE(bad.output.find("in.jsonl' has no [UNK] token"), std::string::npos) << bad.output;
}

// Bytes that are not UTF-8 read as U+FFFD, which BertNormalizer drops with the control characters.
TEST(WordPiece, InvalidUtf8IsDroppedAsTheReplacementCharacter) {
  for (bool lower : {true, false}) {
    const WordPieceTokenizer& tok = shared_wordpiece(lower);
    const auto plain = tok.encode("the cat");
    EXPECT_EQ(tok.encode("the c\xff" "a\xc3t"), plain);
    EXPECT_EQ(tok.encode("the c\xef\xbf\xbd" "at\xe4\xb8"), plain);
    EXPECT_EQ(tok.encode(std::string("the\0 cat", 8)), tok.encode("the cat"));
  }
}

// ---- training ---------------------------------------------------------------------------------------

namespace {

// The tokenizer of a trained vocabulary, through a vocab.txt as train_tokenizer writes it.
WordPieceTokenizer load_trained(const test::TempDir& dir, const std::vector<std::string>& vocab, bool lower) {
  std::string text;
  for (const std::string& t : vocab) text += t + "\n";
  return WordPieceTokenizer(wordpiece_spec(lower, write_vocab(dir, text)));
}

}  // namespace

// Trained on Brown, the vocabulary loads; every document encodes without [UNK] (its whole alphabet is
// kept), decoding then encoding again gives the same ids, and the ids are as few as with the vocabulary
// `tokenizers` trained.
TEST(WordPieceTrainer, TrainsOnBrownAndRoundTrips) {
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  const auto docs = read_jsonl(brown);
  for (bool lower : {true, false}) {
    WordPieceTrainer trainer(lower);
    for (const json& d : docs) trainer.add_text(d.at("text").get<std::string>());
    WordPieceTrainerOptions opt;
    opt.vocab_size = 6000;
    const std::vector<std::string> vocab = trainer.train(opt);
    ASSERT_EQ(vocab.size(), 6000u);
    EXPECT_EQ(std::vector<std::string>(vocab.begin(), vocab.begin() + 5), opt.special_tokens);
    test::TempDir dir(lower ? "uncased" : "cased");
    const WordPieceTokenizer tok = load_trained(dir, vocab, lower);
    EXPECT_GE(tok.token_to_id("the"), 0);
    EXPECT_EQ(tok.token_to_id("The") >= 0, !lower);
    int64_t n_ids = 0;
    for (const json& d : docs) {
      const std::string text = d.at("text");
      const auto ids = tok.encode(text);
      ASSERT_EQ(std::count(ids.begin(), ids.end(), tok.unk()), 0);
      ASSERT_EQ(tok.encode(tok.decode(ids)), ids);
      n_ids += static_cast<int64_t>(ids.size());
    }
    // As compact as the fixture's vocabulary of the same size, which `tokenizers` trained (cased, on
    // Brown and the hard strings): within 2% of its id count on Brown.
    int64_t reference = 0;
    for (const json& c : expected_cases(lower ? "uncased" : "cased", true)) reference += c.at("n_ids").get<int64_t>();
    EXPECT_LT(static_cast<double>(n_ids), 1.02 * static_cast<double>(reference)) << n_ids << " ids, reference " << reference;
  }
}

// Merges follow BPE: the most frequent pair first, "##" dropped from the second part; the alphabet is
// in code-point order after the special tokens, then the "##" forms.
TEST(WordPieceTrainer, SmallCorpusGivesTheExpectedVocabulary) {
  WordPieceTrainer trainer(true);
  trainer.add_text("abab abab ab CAB");
  WordPieceTrainerOptions opt;
  opt.special_tokens = {"[UNK]"};
  opt.vocab_size = 9;
  const std::vector<std::string> expected = {"[UNK]", "a", "b", "c", "##a", "##b", "ab", "##ab", "abab"};
  EXPECT_EQ(trainer.train(opt), expected);
  opt.vocab_size = 3;
  EXPECT_NE(test::error_of([&] { trainer.train(opt); }).find("--vocab-size 3 leaves no room for the alphabet"),
            std::string::npos);
}

TEST(WordPieceTrainer, ThroughTrainTokenizer) {
  MEGADLM_REQUIRE_BINARY("train_tokenizer");
  test::TempDir dir;
  std::ofstream(dir / "in.jsonl") << "{\"text\": \"The cat sat on the mat. The cats sat.\"}\n{\"text\": \"Caf\\u00e9!\"}\n";
  const test::ChildResult r = test::run_binary(
      "train_tokenizer",
      {"--type", "wordpiece", "--lower-case", "--input", dir / "in.jsonl", "--vocab-size", "40", "--min-frequency",
       "1", "--output", dir / "vocab.txt"},
      dir / "train.log");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  const WordPieceTokenizer tok(wordpiece_spec(true, dir / "vocab.txt"));
  const auto ids = tok.encode("The cats sat on the mat. Café!");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.unk()), 0);
  EXPECT_EQ(tok.decode(ids), "the cats sat on the mat. cafe!");
  const test::ChildResult bad = test::run_binary(
      "train_tokenizer", {"--type", "wordpiece", "--input", dir / "in.jsonl", "--vocab-size", "4", "--output", dir / "v2.txt"},
      dir / "bad.log");
  EXPECT_CLEAN_ERROR_EXIT(bad);
  EXPECT_NE(bad.output.find("--vocab-size 4 leaves no room"), std::string::npos) << bad.output;
  const test::ChildResult bad_type = test::run_binary(
      "train_tokenizer", {"--type", "unigram", "--input", dir / "in.jsonl", "--vocab-size", "40", "--output", dir / "v3.txt"},
      dir / "bad_type.log");
  EXPECT_CLEAN_ERROR_EXIT(bad_type);
  EXPECT_NE(bad_type.output.find("--type 'unigram' is not bpe or wordpiece"), std::string::npos) << bad_type.output;
}
