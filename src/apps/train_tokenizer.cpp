// train_tokenizer: trains a byte-level BPE on a .jsonl corpus and writes a HuggingFace tokenizer.json
// (BPE model, ByteLevel pre-tokenizer and decoder, the special tokens as added tokens) that
// `tokenizers` loads and that --tokenizer-type HuggingFaceTokenizer reads back with the same ids;
// or, with --type wordpiece, a BERT WordPiece vocab.txt for --tokenizer-type BertWordPieceLowerCase
// (--lower-case) or BertWordPieceCase.
//
//   train_tokenizer --input corpus.jsonl --json-keys text --vocab-size 8192 --output tokenizer.json
//                   [--special-tokens "<|endoftext|>,<|mask|>"] [--min-frequency 2]
//   train_tokenizer --type wordpiece --lower-case --input corpus.jsonl --vocab-size 8000 --output vocab.txt
#include <chrono>
#include <cstdio>
#include <functional>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/cli_flags.h"
#include "data/jsonl.h"
#include "tokenizers/tokenizer_hf.h"
#include "tokenizers/wordpiece.h"

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

// Calls text_fn with every text of the corpus under `keys`; returns the number of documents.
int64_t for_each_text(const std::string& path, const std::vector<std::string>& keys,
                      const std::function<void(const std::string&)>& text_fn) {
  JsonlReader reader(path);
  std::string line;
  int64_t line_no = 0, docs = 0;
  while (reader.next_line(line, line_no)) {
    const ParsedLine p = parse_jsonl_line(line, keys);
    if (p.status == LineStatus::Blank) continue;
    MEGADLM_CHECK(p.status == LineStatus::Ok, reader.path(), " line ", line_no, ": ", p.error);
    for (const auto& texts : p.texts)
      for (const std::string& t : texts) text_fn(t);
    ++docs;
  }
  MEGADLM_CHECK(docs > 0, reader.path(), ": no documents");
  return docs;
}

void train_bpe(const CliFlags& f, const std::string& out) {
  BpeTrainerOptions opt;
  opt.vocab_size = f.get_int("vocab-size");
  opt.min_frequency = f.get_int("min-frequency");
  opt.special_tokens = split_commas(f.get_list("special-tokens"));
  MEGADLM_CHECK(opt.vocab_size >= static_cast<int64_t>(256 + opt.special_tokens.size()), "--vocab-size ",
                opt.vocab_size, " leaves no room for merges: it must be at least 256 + ", opt.special_tokens.size(),
                " special tokens");
  ByteLevelBpeTrainer trainer;
  const int64_t docs = for_each_text(f.get_string("input"), f.get_list("json-keys"),
                                     [&](const std::string& t) { trainer.add_text(t); });
  const nlohmann::ordered_json j = trainer.train(opt);
  write_file_atomic(out, j.dump(-1, ' ', false) + "\n");
  std::fprintf(stderr, "train_tokenizer: %lld documents, %zu distinct pieces, vocab %zu, %zu merges -> %s",
               static_cast<long long>(docs), trainer.distinct_pieces(), j["model"]["vocab"].size(),
               j["model"]["merges"].size(), out.c_str());
}

void train_wordpiece(const CliFlags& f, const std::string& out) {
  WordPieceTrainerOptions opt;
  opt.vocab_size = f.get_int("vocab-size");
  opt.min_frequency = f.get_int("min-frequency");
  opt.limit_alphabet = f.get_int("limit-alphabet");
  if (f.given("special-tokens")) opt.special_tokens = split_commas(f.get_list("special-tokens"));
  WordPieceTrainer trainer(f.get_bool("lower-case"));
  const int64_t docs = for_each_text(f.get_string("input"), f.get_list("json-keys"),
                                     [&](const std::string& t) { trainer.add_text(t); });
  std::string text;
  for (const std::string& token : trainer.train(opt)) text += token + "\n";
  write_file_atomic(out, text);
  std::fprintf(stderr, "train_tokenizer: %lld documents, %zu distinct words, vocab.txt -> %s",
               static_cast<long long>(docs), trainer.distinct_words(), out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CliFlags f("train_tokenizer",
               "Train a byte-level BPE (tokenizer.json) or a BERT WordPiece vocabulary (vocab.txt) on a .jsonl corpus.");
    f.add_string("type", "bpe", "bpe (byte-level BPE, tokenizer.json) or wordpiece (BERT WordPiece, vocab.txt)");
    f.add_string("input", "", ".jsonl (or .jsonl.gz) corpus, one JSON object per line", true);
    f.add_list("json-keys", {"text"}, "keys whose string values are trained on");
    f.add_int("vocab-size", 0, "vocabulary size, special tokens included (bpe: and the 256 bytes)", at_least(1), true);
    f.add_string("output", "", "tokenizer.json (bpe) or vocab.txt (wordpiece) to write", true);
    f.add_list("special-tokens", {"<|endoftext|>"},
               "special tokens, comma-separated (ids 0, 1, ...); wordpiece default: [PAD],[UNK],[CLS],[SEP],[MASK]");
    f.add_int("min-frequency", 2, "pairs seen fewer times are not merged", at_least(0));
    f.add_bool("lower-case", "wordpiece: lowercase and strip accents (for BertWordPieceLowerCase); else cased");
    f.add_int("limit-alphabet", 1000, "wordpiece: the most frequent characters kept", at_least(1));
    f.parse(argc, argv);
    if (f.help_requested()) {
      std::fputs(f.help().c_str(), stdout);
      return 0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const std::string type = f.get_string("type"), out = f.get_string("output");
    MEGADLM_CHECK(type == "bpe" || type == "wordpiece", "--type '", type, "' is not bpe or wordpiece");
    MEGADLM_CHECK(type == "wordpiece" || !f.given("lower-case"), "--lower-case applies to --type wordpiece only");
    if (type == "bpe") {
      train_bpe(f, out);
    } else {
      train_wordpiece(f, out);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, " (%.2f s)\n", s);
    return 0;
  } catch (const std::exception& e) {  // Error, and JSON errors (e.g. a special token that is not UTF-8)
    std::fprintf(stderr, "train_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
