// text_to_jsonl: turns plain-text files into the .jsonl that preprocess_data reads, one document per
// JSON line ({"text": ...}). Documents are separated by a line equal to --separator (e.g. "%" in
// fortune files) or, without one, each file is one document. Invalid UTF-8 is replaced by U+FFFD.
// --join-lines turns hard-wrapped text into running text: within a document, the lines of a paragraph
// are joined with single spaces (blank lines still separate paragraphs) and space runs are collapsed.
//
//   text_to_jsonl --input a.txt b.txt --separator % --output corpus.jsonl
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/cli_flags.h"

using namespace megadlm;

// Paragraph lines joined by single spaces, paragraphs separated by one newline, space runs collapsed.
static std::string join_lines(const std::string& doc) {
  std::string out;
  size_t newlines = 0;
  bool pending_space = false;
  for (char c : doc) {
    if (c == '\r') continue;
    if (c == '\n') {
      ++newlines;
      continue;
    }
    const bool space = c == ' ' || c == '\t';
    if (newlines > 0 && !out.empty()) {
      out += newlines > 1 ? '\n' : ' ';
      pending_space = false;
    }
    newlines = 0;
    if (space) {
      pending_space = !out.empty() && out.back() != ' ' && out.back() != '\n';
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

int main(int argc, char** argv) {
  try {
    CliFlags f("text_to_jsonl", "Convert plain-text files to a .jsonl corpus, one document per line.");
    f.add_list("input", {}, "text files", true);
    f.add_string("output", "", "output .jsonl", true);
    f.add_string("separator", "", "a line equal to this separates documents (default: one document per file)");
    f.add_string("json-key", "text", "key of the document text");
    f.add_int("min-chars", 1, "drop documents shorter than this", at_least(0));
    f.add_bool("join-lines", "join the lines of each paragraph with spaces (for hard-wrapped text)");
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    const std::string sep = f.get_string("separator"), key = f.get_string("json-key");
    const size_t min_chars = static_cast<size_t>(std::max<int64_t>(1, f.get_int("min-chars")));
    const bool join = f.get_bool("join-lines");
    std::string out;
    int64_t docs = 0;
    auto emit = [&](std::string& doc) {
      if (join) doc = join_lines(doc);
      while (!doc.empty() && (doc.back() == '\n' || doc.back() == '\r')) doc.pop_back();
      if (doc.size() >= min_chars) {
        out += nlohmann::json({{key, doc}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
        ++docs;
      }
      doc.clear();
    };
    for (const std::string& path : f.get_list("input")) {
      std::ifstream in = open_input_file(path, "--input");
      std::string line, doc;
      while (std::getline(in, line)) {
        if (!sep.empty() && line == sep) emit(doc);
        else doc += line + "\n";
      }
      emit(doc);
    }
    write_file_atomic(f.get_string("output"), out);
    std::fprintf(stderr, "text_to_jsonl: %lld documents, %zu bytes -> %s\n", static_cast<long long>(docs), out.size(),
                 f.get_string("output").c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "text_to_jsonl: error: %s\n", e.what());
    return 1;
  }
}
