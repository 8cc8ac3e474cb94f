// preprocess_data's core (preprocess_jsonl), the .jsonl reader, UTF-8 validation and the flag parser.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "core/cli_flags.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"
#include "data/preprocess.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::error_of;
using test::TempDir;
using test::entries_of;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}
std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

PreprocessOptions byte_options(const std::string& input, const std::string& prefix) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.tokenizer.type = "ByteTokenizer";
  o.append_eod = true;
  o.log = false;
  return o;
}

std::vector<int32_t> bytes_of(const std::string& s, bool eod) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  if (eod) v.push_back(256);
  return v;
}

// A corpus of n lines with varied lengths and some non-ASCII text.
std::string make_corpus(int n, uint64_t seed) {
  CounterRng rng(seed, RngPurpose::Test);
  std::string out;
  for (int i = 0; i < n; ++i) {
    const int len = static_cast<int>(rng.uniform(i, 0) * 300);
    std::string t;
    for (int k = 0; k < len; ++k) t += static_cast<char>('a' + static_cast<int>(rng.uniform(i, 1 + k) * 26));
    if (i % 7 == 0) t += " caf\u00e9 \u4e2d\u6587 \\\"quoted\\\"";
    out += "{\"id\": " + std::to_string(i) + ", \"text\": \"" + t + "\"}\n";
  }
  return out;
}

}  // namespace

TEST(Utf8, ValidatesLikeRfc3629) {
  EXPECT_EQ(utf8_invalid_at("plain ascii text, long enough for the 8-byte path"), std::string_view::npos);
  EXPECT_EQ(utf8_invalid_at("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(utf8_invalid_at(std::string_view("a\0b", 3)), std::string_view::npos);
  EXPECT_EQ(utf8_invalid_at("abc\xff"), 3u);                      // never valid
  EXPECT_EQ(utf8_invalid_at("ab\x80"), 2u);                       // stray continuation
  EXPECT_EQ(utf8_invalid_at("\xc0\xaf"), 0u);                     // overlong '/'
  EXPECT_EQ(utf8_invalid_at("\xe0\x80\xaf"), 0u);                 // overlong 3-byte
  EXPECT_EQ(utf8_invalid_at("x\xed\xa0\x80"), 1u);                // UTF-16 surrogate
  EXPECT_EQ(utf8_invalid_at("\xf4\x90\x80\x80"), 0u);             // above U+10FFFF
  EXPECT_EQ(utf8_invalid_at("12345678\xe4\xb8"), 8u);             // truncated at the end
  EXPECT_EQ(utf8_invalid_at("\xe4\x41\xad"), 0u);                 // bad continuation
}

TEST(Jsonl, ChunksCarryLineNumbersAcrossPlainAndGzipInput) {
  TempDir dir("chunks");
  std::string text;
  for (int i = 1; i <= 500; ++i) text += "{\"n\": " + std::to_string(i) + (i % 3 ? "}\n" : "}\r\n");
  text += "{\"n\": 501}";  // the last line has no newline
  write_text(dir / "in.jsonl", text);
  {
    gzFile g = gzopen((dir / "in.jsonl.gz").c_str(), "wb");
    gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
    gzclose(g);
  }
  for (const std::string name : {"in.jsonl", "in.jsonl.gz"}) {
    SCOPED_TRACE(name);
    JsonlReader r(dir / name);
    LineChunk c;
    int64_t expect = 1, chunks = 0;
    while (r.next_chunk(c, 97)) {
      ++chunks;
      EXPECT_EQ(c.first_line, expect);
      for_each_line(c, [&](int64_t n, std::string_view line) {
        ASSERT_EQ(n, expect);
        ASSERT_EQ(line, "{\"n\": " + std::to_string(n) + "}");  // no '\r' left
        ++expect;
      });
    }
    EXPECT_EQ(expect, 502);
    EXPECT_GT(chunks, 20);
    EXPECT_EQ(r.bytes_read(), static_cast<int64_t>(text.size()));
    JsonlReader lines(dir / name);
    std::string line;
    int64_t n = 0, count = 0;
    while (lines.next_line(line, n)) ASSERT_EQ(line, "{\"n\": " + std::to_string(++count) + "}");
    EXPECT_EQ(count, 501);
  }
  // A truncated gzip stream is an Error naming the file, not a silent short read.
  std::string gz = read_text(dir / "in.jsonl.gz");
  write_text(dir / "cut.jsonl.gz", gz.substr(0, gz.size() / 2));
  const std::string msg = error_of([&] {
    JsonlReader r(dir / "cut.jsonl.gz");
    LineChunk c;
    while (r.next_chunk(c)) {
    }
  });
  EXPECT_NE(msg.find(dir / "cut.jsonl.gz"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { JsonlReader r(dir / "absent.jsonl"); }).find("absent.jsonl"), std::string::npos);
  // A line beyond the reader's limit is an Error naming it, instead of unbounded memory.
  write_text(dir / "long.jsonl", "{}\n{}\n" + std::string(300000, 'x') + "\n{}\n");
  const std::string long_msg = error_of([&] {
    JsonlReader r(dir / "long.jsonl", 1000);
    LineChunk c;
    while (r.next_chunk(c, 64)) {
    }
  });
  EXPECT_NE(long_msg.find("long.jsonl: line 3 is longer than 1000 bytes"), std::string::npos) << long_msg;
}

TEST(Jsonl, ParseLineSaysWhatIsWrong) {
  const std::vector<std::string> keys{"text"};
  EXPECT_EQ(parse_jsonl_line("{\"text\": \"hi\"}", keys).texts[0][0], "hi");
  EXPECT_EQ(parse_jsonl_line("   ", keys).status, LineStatus::Blank);
  EXPECT_EQ(parse_jsonl_line("{\"text\": \"h\xff\"}", keys).status, LineStatus::InvalidUtf8);
  EXPECT_EQ(parse_jsonl_line("{\"text\": \"hi\"", keys).status, LineStatus::InvalidJson);
  EXPECT_EQ(parse_jsonl_line("[1, 2]", keys).status, LineStatus::NotObject);
  EXPECT_EQ(parse_jsonl_line("{\"txt\": \"hi\"}", keys).status, LineStatus::MissingKey);
  EXPECT_EQ(parse_jsonl_line("{\"text\": 5}", keys).status, LineStatus::NotString);
  EXPECT_EQ(parse_jsonl_line("{\"text\": [\"a\", 1]}", keys).status, LineStatus::NotString);
  const ParsedLine list = parse_jsonl_line("{\"text\": [\"a\", \"bc\"]}", keys);
  ASSERT_EQ(list.status, LineStatus::Ok);
  EXPECT_EQ(list.texts[0], (std::vector<std::string>{"a", "bc"}));
  EXPECT_NE(parse_jsonl_line("{\"a\": 1}", keys).error.find("missing key 'text'"), std::string::npos);
}

TEST(Preprocess, BadLinesAreReportedWithLineNumbersAndSkipped) {
  TempDir dir("bad");
  const std::string input =
      "{\"text\": \"first\"}\n"          // 1
      "{\"text\": \"second\"}\n"         // 2
      "{\"text\": \"broken\"\n"          // 3 invalid JSON
      "{\"text\": \"\"}\n"               // 4 empty text: a document without sequences
      "{\"title\": \"no text\"}\n"       // 5 missing key
      "{\"text\": 42}\n"                 // 6 not a string
      "{\"text\": \"caf\xc3\xa9\"}\n"    // 7 fine (UTF-8)
      "{\"text\": \"bad \xc3\x28\"}\n"   // 8 invalid UTF-8
      "\n"                               // 9 blank: skipped, not bad
      "[\"text\"]\n"                     // 10 not an object
      "{\"text\": \"last\"}";            // 11, no final newline
  write_text(dir / "in.jsonl", input);
  PreprocessOptions o = byte_options(dir / "in.jsonl", dir / "out");
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.lines, 11);
  EXPECT_EQ(r.documents, 5);
  EXPECT_EQ(r.bad_lines, 5);
  EXPECT_EQ(r.blank_lines, 1);
  ASSERT_EQ(r.bad.size(), 5u);
  const int64_t lines[] = {3, 5, 6, 8, 10};
  const char* reasons[] = {"invalid JSON", "missing key 'text'", "holds a number", "invalid UTF-8", "not a JSON object"};
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(r.bad[k].line, lines[k]);
    EXPECT_NE(r.bad[k].reason.find(reasons[k]), std::string::npos) << r.bad[k].reason;
  }
  const IndexedDataset d(dir / "out_text_document");
  EXPECT_EQ(d.dtype(), IndexDType::U16);
  ASSERT_EQ(d.num_documents(), 5);
  ASSERT_EQ(d.num_sequences(), 4);  // the empty text has no sequence (and no eod), as in Megatron
  EXPECT_EQ(d.get(0), bytes_of("first", true));
  EXPECT_EQ(d.get(1), bytes_of("second", true));
  EXPECT_EQ(d.document_index(3), d.document_index(2));
  EXPECT_EQ(d.get(2), bytes_of("caf\xc3\xa9", true));
  EXPECT_EQ(d.get(3), bytes_of("last", true));
  EXPECT_EQ(r.tokens[0], d.total_tokens());
  // The sidecar names the tokenizer for training.
  const DataSidecar s = read_data_sidecar(dir / "out_text_document");
  EXPECT_EQ(s.spec.type, "ByteTokenizer");
  EXPECT_EQ(s.vocab_size, 257);
  EXPECT_EQ(s.eod, 256);
}

TEST(Preprocess, StrictStopsAtTheFirstBadLineAndWritesNothing) {
  TempDir dir("strict");
  std::string input = make_corpus(300, 1);
  input += "{\"text\": oops}\n";  // line 301
  input += make_corpus(50, 2);
  input += "{\"text\": 1}\n";  // line 352
  write_text(dir / "in.jsonl", input);
  PreprocessOptions o = byte_options(dir / "in.jsonl", dir / "out");
  o.strict = true;
  o.workers = 2;
  o.chunk_bytes = 1000;
  const std::string msg = error_of([&] { preprocess_jsonl(o); });
  EXPECT_NE(msg.find(dir / "in.jsonl:301: invalid JSON"), std::string::npos) << msg;
  EXPECT_EQ(entries_of(dir.str()), std::set<std::string>{"in.jsonl"});  // no output, no temporaries
}

TEST(Preprocess, WorkersGiveByteIdenticalOutput) {
  TempDir dir("workers");
  write_text(dir / "in.jsonl", make_corpus(2000, 3) + "not json\n" + make_corpus(100, 4));
  std::vector<std::string> bins, idxs;
  for (int workers : {1, 2, 3}) {
    PreprocessOptions o = byte_options(dir / "in.jsonl", dir / ("w" + std::to_string(workers)));
    o.workers = workers;
    o.chunk_bytes = 4096;  // many chunks, so that workers finish out of order
    const PreprocessResult r = preprocess_jsonl(o);
    EXPECT_EQ(r.documents, 2100);
    EXPECT_EQ(r.bad_lines, 1);
    ASSERT_EQ(r.bad.size(), 1u);
    EXPECT_EQ(r.bad[0].line, 2001);
    bins.push_back(read_text(r.output_prefixes[0] + ".bin"));
    idxs.push_back(read_text(r.output_prefixes[0] + ".idx"));
  }
  EXPECT_FALSE(bins[0].empty());
  EXPECT_EQ(bins[0], bins[1]);
  EXPECT_EQ(bins[0], bins[2]);
  EXPECT_EQ(idxs[0], idxs[1]);
  EXPECT_EQ(idxs[0], idxs[2]);
  // The same corpus compressed gives the same dataset.
  const std::string text = read_text(dir / "in.jsonl");
  gzFile g = gzopen((dir / "in.jsonl.gz").c_str(), "wb");
  gzwrite(g, text.data(), static_cast<unsigned>(text.size()));
  gzclose(g);
  PreprocessOptions o = byte_options(dir / "in.jsonl.gz", dir / "gz");
  o.workers = 2;
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(read_text(r.output_prefixes[0] + ".bin"), bins[0]);
  EXPECT_EQ(read_text(r.output_prefixes[0] + ".idx"), idxs[0]);
}

// GPT-2's tokenizer is built once and shared by the workers, which parse JSON while it loads: the
// output is still byte-identical for 1, 2 and 3 workers over many small chunks (with a bad and a
// blank line), and every document holds exactly the ids of encoding its text alone.
TEST(Preprocess, SharedGpt2TokenizerGivesByteIdenticalOutput) {
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(merges, "tokenizers/gpt2/merges.txt");
  TempDir dir("shared_tok");
  const std::string head = make_corpus(400, 5), tail = make_corpus(60, 6);
  write_text(dir / "in.jsonl", head + "{\"text\": 3}\n\n" + tail);
  std::vector<std::string> bins, idxs;
  for (int workers : {1, 2, 3}) {
    PreprocessOptions o = byte_options(dir / "in.jsonl", dir / ("w" + std::to_string(workers)));
    o.tokenizer.type = "GPT2BPETokenizer";
    o.tokenizer.vocab_file = vocab;
    o.tokenizer.merge_file = merges;
    o.workers = workers;
    o.chunk_bytes = 2048;  // ~70 chunks: several are parsed before the tokenizer is ready
    const PreprocessResult r = preprocess_jsonl(o);
    EXPECT_EQ(r.documents, 460);
    EXPECT_EQ(r.blank_lines, 1);
    ASSERT_EQ(r.bad.size(), 1u);
    EXPECT_EQ(r.bad[0].line, 401);
    EXPECT_GT(r.startup_seconds, 0.0);
    bins.push_back(read_text(r.output_prefixes[0] + ".bin"));
    idxs.push_back(read_text(r.output_prefixes[0] + ".idx"));
    if (workers != 2) continue;
    TokenizerSpec spec = o.tokenizer;
    const auto tok = make_tokenizer(spec);
    const IndexedDataset d(r.output_prefixes[0]);
    std::istringstream lines(head + tail);
    std::string line;
    int64_t seq = 0;  // an empty text makes a document without a sequence
    for (int64_t i = 0; std::getline(lines, line); ++i) {
      std::vector<int32_t> want = tok->encode(nlohmann::json::parse(line).at("text").get<std::string>());
      if (want.empty()) continue;
      want.push_back(tok->eod());
      ASSERT_EQ(d.get(seq++), want) << "document " << i;
    }
    EXPECT_EQ(seq, d.num_sequences());
  }
  EXPECT_EQ(bins[0], bins[1]);
  EXPECT_EQ(bins[0], bins[2]);
  EXPECT_EQ(idxs[0], idxs[1]);
  EXPECT_EQ(idxs[0], idxs[2]);
}

TEST(Preprocess, SeveralKeysListsAndEmptyInput) {
  TempDir dir("keys");
  write_text(dir / "in.jsonl",
             "{\"title\": \"T1\", \"text\": [\"ab\", \"\", \"cde\"]}\n"
             "{\"title\": \"T2\", \"text\": \"xyz\"}\n"
             "{\"title\": \"T3\"}\n");  // missing text: skipped for both keys
  PreprocessOptions o = byte_options(dir / "in.jsonl", dir / "out");
  o.json_keys = {"text", "title"};
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.documents, 2);
  const IndexedDataset text(dir / "out_text_document"), title(dir / "out_title_document");
  ASSERT_EQ(text.num_documents(), 2);
  ASSERT_EQ(title.num_documents(), 2);
  // A list is the document's sentences: one sequence each (the empty one dropped), eod on the last.
  EXPECT_EQ(text.document_index(1), 2);
  EXPECT_EQ(text.get(0), bytes_of("ab", false));
  EXPECT_EQ(text.get(1), bytes_of("cde", true));
  EXPECT_EQ(text.get(2), bytes_of("xyz", true));
  EXPECT_EQ(title.get(1), bytes_of("T2", true));

  // Empty input: a valid, empty dataset.
  write_text(dir / "empty.jsonl", "");
  const PreprocessResult e = preprocess_jsonl(byte_options(dir / "empty.jsonl", dir / "empty"));
  EXPECT_EQ(e.documents, 0);
  const IndexedDataset d(dir / "empty_text_document");
  EXPECT_EQ(d.num_documents(), 0);
  EXPECT_EQ(d.num_sequences(), 0);

  o.json_keys = {"text", "text"};
  EXPECT_NE(error_of([&] { preprocess_jsonl(o); }).find("twice"), std::string::npos);
  o = byte_options(dir / "absent.jsonl", dir / "x");
  EXPECT_NE(error_of([&] { preprocess_jsonl(o); }).find("absent.jsonl"), std::string::npos);
}

TEST(Preprocess, LargeVocabularyWritesInt32) {
  TempDir dir("null");
  write_text(dir / "in.jsonl",
             "{\"text\": \"5 69999 0\"}\n{\"text\": \"70000\"}\n{\"text\": \"not ids\"}\n{\"text\": \"12\"}\n");
  PreprocessOptions o = byte_options(dir / "in.jsonl", dir / "out");
  o.tokenizer.type = "NullTokenizer";
  o.tokenizer.null_vocab_size = 70000;  // ids 0..69999, eod 70000: too many for uint16
  o.workers = 2;
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.documents, 3);
  // Text the tokenizer rejects is a bad line too, reported with its number.
  ASSERT_EQ(r.bad.size(), 1u);
  EXPECT_EQ(r.bad[0].line, 3);
  EXPECT_NE(r.bad[0].reason.find("tokenizer: "), std::string::npos) << r.bad[0].reason;
  const IndexedDataset d(r.output_prefixes[0]);
  EXPECT_EQ(d.dtype(), IndexDType::I32);
  EXPECT_EQ(d.get(0), (std::vector<int32_t>{5, 69999, 0, 70000}));
  EXPECT_EQ(d.get(2), (std::vector<int32_t>{12, 70000}));
  EXPECT_EQ(read_data_sidecar(r.output_prefixes[0]).spec.null_vocab_size, 70000);
}

TEST(Preprocess, Gpt2OnBrownDecodesBack) {
  MEGADLM_REQUIRE_SHARED(brown, "data/brown.jsonl");
  MEGADLM_REQUIRE_SHARED(vocab, "tokenizers/gpt2/vocab.json");
  MEGADLM_REQUIRE_SHARED(merges, "tokenizers/gpt2/merges.txt");
  TempDir dir("brown");
  // The first 12 documents keep the test fast.
  std::ifstream in(brown);
  std::string line, head;
  std::vector<std::string> texts;
  for (int i = 0; i < 12 && std::getline(in, line); ++i) {
    head += line + "\n";
    texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  }
  write_text(dir / "brown.jsonl", head);
  PreprocessOptions o = byte_options(dir / "brown.jsonl", dir / "brown");
  o.tokenizer.type = "GPT2BPETokenizer";
  o.tokenizer.vocab_file = vocab;
  o.tokenizer.merge_file = merges;
  o.workers = 2;
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.documents, 12);
  const IndexedDataset d(r.output_prefixes[0]);
  EXPECT_EQ(d.dtype(), IndexDType::U16);  // GPT-2's 50257 ids fit uint16
  const DataSidecar s = read_data_sidecar(r.output_prefixes[0]);
  EXPECT_EQ(s.vocab_size, 50257);
  EXPECT_EQ(s.eod, 50256);
  const auto tok = make_tokenizer(s.spec);
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> ids = d.get(i);
    ASSERT_EQ(ids.back(), 50256);
    ids.pop_back();
    EXPECT_EQ(tok->decode(ids), texts[i]) << "document " << i;
  }
}

TEST(CliFlags, ParsesMegatronStyleFlags) {
  CliFlags f("prog", "test");
  f.add_string("input", "", "in", true);
  f.add_list("json-keys", {"text"}, "keys");
  f.add_int("workers", 1, "n");
  f.add_double("lr", 0.5, "rate");
  f.add_bool("append-eod", "eod");
  f.parse(std::vector<std::string>{"--input", "a.jsonl", "--json-keys", "text", "title", "--workers=3", "--append-eod",
                                   "--lr", "-1e-3"});
  EXPECT_EQ(f.get_string("input"), "a.jsonl");
  EXPECT_EQ(f.get_list("json-keys"), (std::vector<std::string>{"text", "title"}));
  EXPECT_EQ(f.get_int("workers"), 3);
  EXPECT_DOUBLE_EQ(f.get_double("lr"), -1e-3);
  EXPECT_TRUE(f.get_bool("append-eod"));
  EXPECT_TRUE(f.given("workers"));
  auto parse = [](std::vector<std::string> args) {
    return error_of([&] {
      CliFlags g("prog", "");
      g.add_string("input", "", "in", true);
      g.add_int("workers", 1, "n");
      g.add_bool("strict", "s");
      g.parse(args);
    });
  };
  EXPECT_NE(parse({"--input", "x", "--wrokers", "2"}).find("unknown flag --wrokers"), std::string::npos);
  EXPECT_NE(parse({"--input", "x", "--workers", "two"}).find("--workers expects an integer, got 'two'"), std::string::npos);
  EXPECT_NE(parse({"--input"}).find("--input expects a value"), std::string::npos);
  EXPECT_NE(parse({"--workers", "2"}).find("missing required flag --input"), std::string::npos);
  EXPECT_NE(parse({"--input", "x", "--strict=maybe"}).find("--strict"), std::string::npos);
  EXPECT_NE(parse({"--input", "x", "stray"}).find("unexpected argument 'stray'"), std::string::npos);
  CliFlags h("prog", "does things");
  h.add_string("input", "", "the input file", true);
  h.parse(std::vector<std::string>{"--help"});
  EXPECT_TRUE(h.help_requested());
  EXPECT_NE(h.help().find("--input STR"), std::string::npos);
  EXPECT_NE(h.help().find("the input file (required)"), std::string::npos);
}

// The command-line program: exit codes and an end-to-end run (skipped when it was not built).
TEST(Preprocess, CommandLineProgram) {
  const std::string bin = std::string(MEGADLM_BINARY_DIR) + "/bin/preprocess_data";
  if (!fs::exists(bin)) GTEST_SKIP() << bin << " is not built";
  TempDir dir("cli");
  write_text(dir / "in.jsonl", "{\"text\": \"hello\"}\n{\"text\": 3}\n");
  const std::string base = bin + " --input " + (dir / "in.jsonl") + " --output-prefix " + (dir / "o") +
                           " --tokenizer-type ByteTokenizer --append-eod --log-interval 1";
  EXPECT_EQ(std::system((bin + " --help > /dev/null").c_str()), 0);
  EXPECT_NE(std::system((base + " --bogus 2> /dev/null").c_str()), 0);
  EXPECT_NE(std::system((base + " --strict 2> /dev/null").c_str()), 0);
  EXPECT_FALSE(fs::exists(dir / "o_text_document.idx"));
  EXPECT_EQ(std::system((base + " --workers 2 > /dev/null 2>&1").c_str()), 0);
  const IndexedDataset d(dir / "o_text_document");
  EXPECT_EQ(d.num_documents(), 1);
  EXPECT_EQ(d.get(0), bytes_of("hello", true));
}
