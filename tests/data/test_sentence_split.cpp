// The rule-based sentence splitter (data/sentence_split.h) and preprocess_data --split-sentences.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/sentence_split.h"
#include "robustness/child_process.h"
#include "test_util.h"

using namespace megadlm;

namespace {

std::vector<std::string> split(const std::string& text, bool keep_newlines = false) {
  std::vector<std::string> out;
  for (std::string_view s : split_sentences(text, keep_newlines)) out.emplace_back(s);
  return out;
}

using Sentences = std::vector<std::string>;

PreprocessOptions byte_options(const std::string& input, const std::string& prefix) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.tokenizer.type = "ByteTokenizer";
  o.split_sentences = true;
  o.log = false;
  return o;
}

std::vector<int32_t> bytes_of(const std::string& s) {
  std::vector<int32_t> v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}

}  // namespace

TEST(SentenceSplit, EndsAtTerminalPunctuationBeforeACapital) {
  EXPECT_EQ(split("The cat sat. The dog ran! Did it? Yes."),
            (Sentences{"The cat sat.", "The dog ran!", "Did it?", "Yes."}));
  EXPECT_EQ(split("  Leading space. Trailing space.  \n"), (Sentences{"Leading space.", "Trailing space."}));
  EXPECT_EQ(split("No final punctuation here"), (Sentences{"No final punctuation here"}));
  EXPECT_EQ(split("It cost $5. 10 people came."), (Sentences{"It cost $5.", "10 people came."}));
  EXPECT_EQ(split("Wait... What happened?! Nothing."), (Sentences{"Wait...", "What happened?!", "Nothing."}));
  // A lower-case word after the period does not start a sentence.
  EXPECT_EQ(split("see below. the end"), (Sentences{"see below. the end"}));
  // No whitespace after the period: decimals, and words joined by a period.
  EXPECT_EQ(split("Pi is 3.14 or so. Version 2.0.1 is out."), (Sentences{"Pi is 3.14 or so.", "Version 2.0.1 is out."}));
}

TEST(SentenceSplit, AbbreviationsAndInitialsDoNotEndASentence) {
  EXPECT_EQ(split("Mr. Smith met Dr. Jones and Mrs. Brown. They talked."),
            (Sentences{"Mr. Smith met Dr. Jones and Mrs. Brown.", "They talked."}));
  EXPECT_EQ(split("I met J. R. Smith. He said hi."), (Sentences{"I met J. R. Smith.", "He said hi."}));
  EXPECT_EQ(split("The U.S. Army left. Tools, e.g. Hammers, i.e. Heavy ones."),
            (Sentences{"The U.S. Army left.", "Tools, e.g. Hammers, i.e. Heavy ones."}));
  EXPECT_EQ(split("Prof. Ada (Ph.D. Oxford) spoke at St. Paul's. Acme Inc. Sold it."),
            (Sentences{"Prof. Ada (Ph.D. Oxford) spoke at St. Paul's.", "Acme Inc. Sold it."}));
  EXPECT_EQ(split("See fig. 3 for the plot. It rose."), (Sentences{"See fig. 3 for the plot.", "It rose."}));
}

TEST(SentenceSplit, QuotesAndBracketsStayWithTheirSentence) {
  EXPECT_EQ(split("He said \"Stop.\" She stopped."), (Sentences{"He said \"Stop.\"", "She stopped."}));
  EXPECT_EQ(split("Then (an aside.) More text. \"Quoted,\" he said."),
            (Sentences{"Then (an aside.)", "More text.", "\"Quoted,\" he said."}));
  EXPECT_EQ(split("He said \xE2\x80\x9Cno.\xE2\x80\x9D \xE2\x80\x9CWhy?\xE2\x80\x9D she asked."),
            (Sentences{"He said \xE2\x80\x9Cno.\xE2\x80\x9D", "\xE2\x80\x9CWhy?\xE2\x80\x9D she asked."}));
  EXPECT_EQ(split("Il est parti. \xC3\x89" "cole ferm\xC3\xA9" "e."),
            (Sentences{"Il est parti.", "\xC3\x89" "cole ferm\xC3\xA9" "e."}));
}

TEST(SentenceSplit, WhitespaceAndKeepNewlines) {
  EXPECT_TRUE(split("").empty());
  EXPECT_TRUE(split("  \n\t \n").empty());
  const std::string text = "First line.\nSecond line.\n\nThird one.  Fourth.\n";
  EXPECT_EQ(split(text), (Sentences{"First line.", "Second line.", "Third one.", "Fourth."}));
  EXPECT_EQ(split(text, true), (Sentences{"First line.\n", "Second line.\n\n", "Third one.  ", "Fourth."}));
  // A newline without terminal punctuation does not end a sentence (as punkt).
  EXPECT_EQ(split("A heading\nThe text. More."), (Sentences{"A heading\nThe text.", "More."}));
}

// Each sentence one sequence; documents as the document index; the _sentence name and sidecar flag.
TEST(SplitSentencesPreprocess, OneSequencePerSentence) {
  test::TempDir dir;
  std::ofstream(dir / "in.jsonl") << "{\"text\": \"One. Two! Three?\"}\n"
                                     "{\"text\": \"\"}\n"
                                     "{\"text\": \"   \"}\n"
                                     "{\"text\": [\"A list. Of two.\", \"Then more.\"]}\n"
                                     "{\"text\": \"Single sentence\"}\n";
  PreprocessOptions o = byte_options(dir / "in.jsonl", dir / "out");
  o.append_eod = true;
  const PreprocessResult r = preprocess_jsonl(o);
  ASSERT_EQ(r.output_prefixes, std::vector<std::string>{dir / "out_text_sentence"});
  const IndexedDataset d(dir / "out_text_sentence");
  ASSERT_EQ(d.num_documents(), 5);
  const std::vector<int64_t> doc_index{0, 3, 3, 3, 6, 7};
  for (int64_t j = 0; j <= 5; ++j) EXPECT_EQ(d.document_index(j), doc_index[j]) << j;
  const Sentences want{"One.", "Two!", "Three?", "A list.", "Of two.", "Then more.", "Single sentence"};
  for (int64_t s = 0; s < d.num_sequences(); ++s) {
    std::vector<int32_t> ids = bytes_of(want[s]);
    if (s == 2 || s == 5 || s == 6) ids.push_back(256);  // --append-eod ends each document's last sentence
    EXPECT_EQ(d.get(s), ids) << s;
  }
  const auto sidecar = nlohmann::json::parse(read_file(sidecar_path(dir / "out_text_sentence")));
  EXPECT_EQ(sidecar.value("split_sentences", false), true);
  EXPECT_EQ(read_data_sidecar(dir / "out_text_sentence").spec.type, "ByteTokenizer");
  EXPECT_FALSE(std::filesystem::exists(dir / "out_text_document.idx"));

  o.keep_newlines = true;
  o.append_eod = false;
  std::ofstream(dir / "nl.jsonl") << "{\"text\": \"Line one.\\nLine two.\\n\"}\n";
  o.input = dir / "nl.jsonl";
  o.output_prefix = dir / "nl";
  preprocess_jsonl(o);
  const IndexedDataset nl(dir / "nl_text_sentence");
  ASSERT_EQ(nl.num_sequences(), 2);
  EXPECT_EQ(nl.get(0), bytes_of("Line one.\n"));
  EXPECT_EQ(nl.get(1), bytes_of("Line two."));
}

// The output does not depend on the number of workers (chunks are written in input order).
TEST(SplitSentencesPreprocess, SameBytesForAnyNumberOfWorkers) {
  test::TempDir dir;
  {
    std::ofstream f(dir / "in.jsonl");
    for (int i = 0; i < 600; ++i) {
      f << "{\"text\": \"";
      for (int s = 0; s < i % 9; ++s) f << "Sentence " << s << " of doc " << i << (s % 3 == 0 ? "! " : ". Mr. X. ");
      f << "\"}\n";
    }
  }
  std::string first_bin, first_idx;
  for (int workers : {1, 2, 5}) {
    PreprocessOptions o = byte_options(dir / "in.jsonl", dir / ("w" + std::to_string(workers)));
    o.workers = workers;
    o.chunk_bytes = 997;  // many chunks, so that the workers interleave
    preprocess_jsonl(o);
    const std::string prefix = sentence_prefix(o.output_prefix, "text");
    const std::string bin = read_file(bin_path(prefix)), idx = read_file(idx_path(prefix));
    if (workers == 1) {
      first_bin = bin;
      first_idx = idx;
      const IndexedDataset d(prefix);
      EXPECT_EQ(d.num_documents(), 600);
      EXPECT_GT(d.num_sequences(), 1500);
      continue;
    }
    EXPECT_EQ(bin, first_bin) << workers << " workers";
    EXPECT_EQ(idx, first_idx) << workers << " workers";
  }
}

TEST(SplitSentencesPreprocess, FlagsThatDoNotGoTogetherAreErrors) {
  test::TempDir dir;
  std::ofstream(dir / "in.jsonl") << "{\"text\": \"One. Two.\"}\n";
  PreprocessOptions o = byte_options(dir / "in.jsonl", dir / "out");
  o.split_sentences = false;
  o.keep_newlines = true;
  EXPECT_NE(test::error_of([&] { preprocess_jsonl(o); }).find("--keep-newlines needs --split-sentences"),
            std::string::npos);
  o.split_sentences = true;
  o.keep_newlines = false;
  o.chat_template = "chatml";
  EXPECT_NE(test::error_of([&] { preprocess_jsonl(o); }).find("--split-sentences does not apply with --chat-template"),
            std::string::npos);
}

TEST(SplitSentencesPreprocess, ThroughTheProgram) {
  MEGADLM_REQUIRE_BINARY("preprocess_data");
  test::TempDir dir;
  std::ofstream(dir / "in.jsonl") << "{\"text\": \"Dr. Who arrived. He left.\\n\"}\n";
  const test::ChildResult r =
      test::run_binary("preprocess_data",
                       {"--input", dir / "in.jsonl", "--output-prefix", dir / "out", "--tokenizer-type",
                        "ByteTokenizer", "--split-sentences", "--keep-newlines", "--workers", "2"},
                       dir / "ok.log");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  const IndexedDataset d(dir / "out_text_sentence");
  ASSERT_EQ(d.num_sequences(), 2);
  EXPECT_EQ(d.get(0), bytes_of("Dr. Who arrived. "));
  EXPECT_EQ(d.get(1), bytes_of("He left."));
  const test::ChildResult bad = test::run_binary(
      "preprocess_data",
      {"--input", dir / "in.jsonl", "--output-prefix", dir / "bad", "--tokenizer-type", "ByteTokenizer", "--keep-newlines"},
      dir / "bad.log");
  EXPECT_CLEAN_ERROR_EXIT(bad);
  EXPECT_NE(bad.output.find("--keep-newlines needs --split-sentences"), std::string::npos) << bad.output;
}
