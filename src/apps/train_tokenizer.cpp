// train_tokenizer: trains a byte-level BPE on a .jsonl corpus and writes a HuggingFace tokenizer.json
// (BPE model, ByteLevel pre-tokenizer and decoder, the special tokens as added tokens) that
// `tokenizers` loads and that --tokenizer-type HuggingFaceTokenizer reads back with the same ids.
//
//   train_tokenizer --input corpus.jsonl --json-keys text --vocab-size 8192 --output tokenizer.json
//                   [--special-tokens "<|endoftext|>,<|mask|>"] [--min-frequency 2]
#include <chrono>
#include <cstdio>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/cli_flags.h"
#include "data/jsonl.h"
#include "tokenizers/tokenizer_hf.h"

using namespace megadlm;

namespace {
std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      size_t comma = item.find(',', start);
      if (comma == std::string::npos) comma = item.size();
      if (comma > start) out.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("train_tokenizer", "Train a byte-level BPE tokenizer on a .jsonl corpus; writes tokenizer.json.");
    f.add_string("input", "", ".jsonl (or .jsonl.gz) corpus, one JSON object per line", true);
    f.add_list("json-keys", {"text"}, "keys whose string values are trained on");
    f.add_int("vocab-size", 0, "vocabulary size, special tokens and the 256 bytes included", at_least(1), true);
    f.add_string("output", "", "tokenizer.json to write", true);
    f.add_list("special-tokens", {"<|endoftext|>"}, "special tokens, comma-separated (ids 0, 1, ...)");
    f.add_int("min-frequency", 2, "pairs seen fewer times are not merged", at_least(0));
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    BpeTrainerOptions opt;
    opt.vocab_size = f.get_int("vocab-size");
    opt.min_frequency = f.get_int("min-frequency");
    opt.special_tokens = split_commas(f.get_list("special-tokens"));
    MEGADLM_CHECK(opt.vocab_size >= static_cast<int64_t>(256 + opt.special_tokens.size()), "--vocab-size ",
                  opt.vocab_size, " leaves no room for merges: it must be at least 256 + ", opt.special_tokens.size(),
                  " special tokens");
    const std::vector<std::string> keys = f.get_list("json-keys");

    ByteLevelBpeTrainer trainer;
    JsonlReader reader(f.get_string("input"));
    std::string line;
    int64_t line_no = 0, docs = 0;
    while (reader.next_line(line, line_no)) {
      const ParsedLine p = parse_jsonl_line(line, keys);
      if (p.status == LineStatus::Blank) continue;
      MEGADLM_CHECK(p.status == LineStatus::Ok, reader.path(), " line ", line_no, ": ", p.error);
      for (const auto& texts : p.texts)
        for (const std::string& t : texts) trainer.add_text(t);
      ++docs;
    }
    MEGADLM_CHECK(docs > 0, reader.path(), ": no documents");
    const nlohmann::ordered_json j = trainer.train(opt);
    const std::string out = f.get_string("output");
    write_file_atomic(out, j.dump(-1, ' ', false) + "\n");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "train_tokenizer: %lld documents, %zu distinct pieces, vocab %zu, %zu merges -> %s (%.2f s)\n",
                 static_cast<long long>(docs), trainer.distinct_pieces(), j["model"]["vocab"].size(),
                 j["model"]["merges"].size(), out.c_str(), s);
    return 0;
  } catch (const std::exception& e) {  // Error, and JSON errors (e.g. a special token that is not UTF-8)
    std::fprintf(stderr, "train_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
