// Bad input: the cases of docs/robustness.md's "Bad input" table that the data, tokenizer and
// checkpoint suites do not already cover (the table names every case's test), and a
// few of each family through the built programs: an error naming the file or flag and what is
// wrong, exit status 1 (an Error, not a crash or an internal error), no hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/native_checkpoint.h"
#include "child_process.h"
#include "core/error.h"
#include "tokenizers/gpt2_bpe_tokenizer.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"
#include "data/preprocess.h"
#include "tokenizers/tokenizer.h"
#include "kernels/dispatch.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

namespace {

using test::error_of;
// Expects an Error whose message holds every one of `parts`.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string msg = error_of(f);
  ASSERT_FALSE(msg.empty()) << "no Error (expected one naming " << parts.at(0) << ")";
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

using test::plus;

// pretrain_difflm flags of a tiny run (no argv[0]).
std::vector<std::string> train_flags(const std::string& data) { return test::tiny_difflm_flags(data); }

// `f` with each "--flag value" pair (or lone "--flag") of `changes` replacing the flag's value, or
// appended when `f` lacks it (a flag given twice is an error of its own).
std::vector<std::string> with(std::vector<std::string> f, const std::vector<std::string>& changes) {
  for (size_t i = 0; i < changes.size(); ++i) {
    const bool has_value = i + 1 < changes.size() && changes[i + 1].rfind("--", 0) != 0;
    auto it = std::find(f.begin(), f.end(), changes[i]);
    if (it != f.end() && has_value && it + 1 != f.end()) {
      *(it + 1) = changes[i + 1];
    } else {
      f.push_back(changes[i]);
      if (has_value) f.push_back(changes[i + 1]);
    }
    if (has_value) ++i;
  }
  return f;
}

std::vector<std::string> argv0(const std::vector<std::string>& f) { return plus({"pretrain_difflm"}, f); }

// A GPT-2 style byte-level vocab.json covering the 256 byte symbols (bytes_to_unicode) plus
// <|endoftext|>, and a merges.txt with one merge: small, valid, independent of ../shared.
std::string byte_symbol(int b) {
  // Printable Latin-1 bytes stand for themselves; the others map to U+0100 + n in order.
  auto printable = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF); };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x) n += !printable(x);
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string tiny_gpt2_vocab() {
  nlohmann::json v = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) v[byte_symbol(b)] = b;
  v["th"] = 256;
  v["<|endoftext|>"] = 257;
  return v.dump();
}

}  // namespace

// ---- .jsonl -------------------------------------------------------------------------------------

// A 100 MB line: buffered once (memory bounded by the reader's per-line limit, 1 GiB by default),
// read and parsed in linear time, reported by line number when bad (here: a 100 MB value under the
// wrong key), and its neighbours kept; a reader with a lower limit refuses it with an Error naming
// the line before buffering past the limit. A bad line's report stays short even when the parser's
// message quotes the line (1 MB of unterminated string).
TEST(BadInput, JsonlHundredMegabyteLine) {
  test::TempDir dir;
  const std::string path = dir / "huge.jsonl";
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"text\": \"before\"}\n{\"body\": \"";
    const std::string block(1 << 20, 'a');
    for (int i = 0; i < 100; ++i) out << block;
    out << "\"}\n{\"text\": \"" << block << "\n{\"text\": \"after\"}\n";
  }
  PreprocessOptions o;
  o.input = path;
  o.output_prefix = dir / "out";
  o.tokenizer.type = "ByteTokenizer";
  o.log = false;
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.lines, 4);
  EXPECT_EQ(r.documents, 2);
  ASSERT_EQ(r.bad.size(), 2u);
  EXPECT_EQ(r.bad[0].line, 2);
  EXPECT_NE(r.bad[0].reason.find("missing key 'text'"), std::string::npos) << r.bad[0].reason.substr(0, 400);
  EXPECT_EQ(r.bad[1].line, 3);
  EXPECT_NE(r.bad[1].reason.find("invalid JSON"), std::string::npos) << r.bad[1].reason.substr(0, 400);
  EXPECT_LT(r.bad[1].reason.size(), 400u);  // the start of nlohmann's message, not the 1 MB it quotes
  const IndexedDataset d(dir / "out_text_document");
  EXPECT_EQ(d.num_documents(), 2);

  expect_error(
      [&] {
        JsonlReader reader(path, size_t(16) << 20);
        LineChunk c;
        while (reader.next_chunk(c)) {
        }
      },
      {path, "line 2 is longer than 16777216 bytes"});
}

// Through the program: --strict stops at the first bad line naming file and line (exit 1); an empty
// input is a valid empty dataset (exit 0).
TEST(BadInput, PreprocessProgramOnBadJsonl) {
  MEGADLM_REQUIRE_BINARY("preprocess_data");
  test::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"text\": \"ok\"}\n{\"text\": \"no end\n", ":2: invalid JSON"},
      {"{\"text\": \"ok\"}\n{\"title\": \"x\"}\n", ":2: missing key 'text'"},
      {"{\"text\": \"bad \xc3\x28 utf-8\"}\n", ":1: invalid UTF-8"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].second);
    const std::string in = dir / ("in" + std::to_string(i) + ".jsonl");
    write_text(in, cases[i].first);
    const auto r = test::run_binary("preprocess_data",
                                    {"--input", in, "--output-prefix", dir / "o", "--tokenizer-type", "ByteTokenizer",
                                     "--strict"},
                                    dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(in + cases[i].second), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "o_text_document.idx"));
  }
  write_text(dir / "empty.jsonl", "");
  const auto r = test::run_binary(
      "preprocess_data", {"--input", dir / "empty.jsonl", "--output-prefix", dir / "e", "--tokenizer-type", "ByteTokenizer"},
      dir / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_EQ(IndexedDataset(dir / "e_text_document").num_documents(), 0);
}

// ---- .idx / .bin through the programs (every corruption is covered in tests/data) ----------------

TEST(BadInput, CorruptIndexThroughThePrograms) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  MEGADLM_REQUIRE_BINARY("inspect_data");
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  std::string idx = test::read_log(data + ".idx"), bin = test::read_log(data + ".bin");
  const std::string bad = dir / "bad";
  // Wrong magic.
  std::string i2 = idx;
  i2[2] = 'Q';
  write_text(bad + ".idx", i2);
  write_text(bad + ".bin", bin);
  auto r = test::run_binary("inspect_data", {"--data-path", bad}, dir / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find(bad + ".idx: bad magic"), std::string::npos) << r.output;
  // Unknown dtype code.
  i2 = idx;
  i2[17] = 42;
  write_text(bad + ".idx", i2);
  r = test::run_binary("pretrain_difflm", plus(train_flags(bad), {"--train-iters", "1"}), dir / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find(bad + ".idx"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unknown dtype code 42"), std::string::npos) << r.output;
  // A truncated .bin: the index points beyond its end.
  write_text(bad + ".idx", idx);
  write_text(bad + ".bin", bin.substr(0, bin.size() / 2));
  r = test::run_binary("pretrain_difflm", plus(train_flags(bad), {"--train-iters", "1"}), dir / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find(bad + ".bin"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("beyond the end"), std::string::npos) << r.output;
}

// ---- a vocabulary that does not match the data ----------------------------------------------------

// Token ids >= the model's vocabulary in the .bin: an Error naming the .bin and the id, raised when
// the sample is read (never an embedding row past the table).
TEST(BadInput, TokensBeyondTheVocabularyNameTheBinFile) {
  test::TempDir dir;
  const std::string prefix = dir / "wide_text_document";
  {
    IndexedDatasetWriter w(prefix, IndexDType::U16);
    for (int d = 0; d < 40; ++d) {
      std::vector<int32_t> doc;
      for (int i = 0; i < 30; ++i) doc.push_back((d * 31 + i * 7) % 100);  // ids up to 99
      doc.push_back(63);
      w.add_document(doc);
    }
    w.finalize();
  }
  const IndexedDataset bounded(prefix, 64);
  expect_error([&] { bounded.get(0); }, {prefix + ".bin", "sequence 0 holds token id", "vocabulary has 64 ids"});
  EXPECT_EQ(IndexedDataset(prefix).get(0).size(), 31u);  // no bound: readable as before

  // 64 NullTokenizer ids plus its eod, padded to a multiple of 16: 80.
  expect_error([&] { test::run_training(argv0(train_flags(prefix)), {"--train-iters", "2"}); },
               {prefix + ".bin", "holds token id", "the model's vocabulary has 80 ids"});
  if (fs::exists(test::binary_path("pretrain_difflm"))) {
    const auto r = test::run_binary("pretrain_difflm", plus(train_flags(prefix), {"--train-iters", "2"}), dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(prefix + ".bin"), std::string::npos) << r.output;
  }
}

// ---- tokenizer files ----------------------------------------------------------------------------

// vocab.json / merges.txt without ../shared (the GPT-2 suite needs the real files): each malformed
// variant of a tiny valid pair is an Error naming the file.
TEST(BadInput, MalformedGpt2VocabAndMerges) {
  test::TempDir dir;
  const std::string vocab = dir / "vocab.json", merges = dir / "merges.txt";
  write_text(vocab, tiny_gpt2_vocab());
  write_text(merges, "#version: 0.2\nt h\n");
  TokenizerSpec s;
  s.type = "GPT2BPETokenizer";
  s.vocab_file = vocab;
  s.merge_file = merges;
  {
    GPT2BPETokenizer ok(s);  // the pair is valid
    EXPECT_EQ(ok.encode("the"), (std::vector<int32_t>{256, 'e'}));
  }
  const std::string v2 = dir / "vocab2.json", m2 = dir / "merges2.txt";
  const std::vector<std::pair<std::string, std::string>> bad_vocabs = {
      {"", "vocab2.json"},
      {"{\"a\": 0, ", "not valid JSON"},
      {"[1, 2, 3]", "vocab2.json"},
      {"{\"a\": \"zero\"}", "vocab2.json"},
      {tiny_gpt2_vocab().substr(0, 300), "vocab2.json"},  // truncated
  };
  for (const auto& [text, fault] : bad_vocabs) {
    SCOPED_TRACE(text.substr(0, 40));
    write_text(v2, text);
    TokenizerSpec b = s;
    b.vocab_file = v2;
    expect_error([&] { GPT2BPETokenizer t(b); }, {v2, fault});
  }
  const std::vector<std::string> bad_merges = {"#version: 0.2\nonlyone\n", "#version: 0.2\nx y z\n",
                                               "#version: 0.2\nq \xff\n"};
  for (const auto& text : bad_merges) {
    SCOPED_TRACE(text);
    write_text(m2, text);
    TokenizerSpec b = s;
    b.merge_file = m2;
    expect_error([&] { GPT2BPETokenizer t(b); }, {m2});
  }
  // Through preprocess_data: exit 1 naming the file.
  if (fs::exists(test::binary_path("preprocess_data"))) {
    write_text(v2, "{\"a\": 0, ");
    write_text(dir / "in.jsonl", "{\"text\": \"hi\"}\n");
    const auto r = test::run_binary("preprocess_data",
                                    {"--input", dir / "in.jsonl", "--output-prefix", dir / "o", "--tokenizer-type",
                                     "GPT2BPETokenizer", "--vocab-file", v2, "--merge-file", merges},
                                    dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(v2), std::string::npos) << r.output;
  }
}

// A truncated or empty SentencePiece model and a truncated tokenizer.json: Errors naming the file.
TEST(BadInput, TruncatedTokenizerModels) {
  test::TempDir dir;
  const std::string fixtures = std::string(MEGADLM_SOURCE_DIR) + "/tests/tokenizers/fixtures/";
  TokenizerSpec hf;
  hf.type = "HuggingFaceTokenizer";
  hf.tokenizer_model = dir / "tokenizer.json";
  write_text(hf.tokenizer_model, test::read_log(fixtures + "hf_gpt2_small.json").substr(0, 2000));
  expect_error([&] { make_tokenizer(hf); }, {hf.tokenizer_model});
  write_text(hf.tokenizer_model, "");
  expect_error([&] { make_tokenizer(hf); }, {hf.tokenizer_model});
#ifdef MEGADLM_HAVE_SENTENCEPIECE
  TokenizerSpec sp;
  sp.type = "SentencePieceTokenizer";
  sp.tokenizer_model = dir / "tok.model";
  const std::string model = test::read_log(fixtures + "tiny_sp.model");
  for (const size_t keep : {model.size() / 2, size_t(7), size_t(0)}) {
    SCOPED_TRACE(keep);
    write_text(sp.tokenizer_model, model.substr(0, keep));
    expect_error([&] { make_tokenizer(sp); }, {sp.tokenizer_model});
  }
#endif
}

// ---- safetensors with a lying header, through convert_checkpoint (each lie is covered in
// tests/checkpoint/test_safetensors.cpp) -------------------------------------------------------------

TEST(BadInput, LyingSafetensorsHeaderThroughConvertCheckpoint) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  test::TempDir dir;
  const std::string src = std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/hf_qwen2";
  const std::string file = test::read_log(src + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  const std::string data = file.substr(8 + n);
  std::string first;  // a tensor name
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__") {
      first = it.key();
      break;
    }
  auto with_header = [&](const nlohmann::json& h) {
    const std::string t = h.dump();
    const uint64_t len = t.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &len, 8);
    return out + t + data;
  };
  struct Case {
    std::string name, content, fault;
  };
  nlohmann::json out_of_range = header, overlap = header, unknown = header;
  out_of_range[first]["data_offsets"][1] = data.size() + 4;
  out_of_range[first]["data_offsets"][0] = data.size() + 4 - out_of_range[first]["data_offsets"][1].get<uint64_t>() +
                                           header[first]["data_offsets"][0].get<uint64_t>();
  std::string second;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__" && it.key() != first) {
      second = it.key();
      break;
    }
  overlap[second]["data_offsets"] = header[first]["data_offsets"];
  unknown[first]["dtype"] = "F13";
  std::string huge_len = file;
  const uint64_t lie = file.size();  // the header would end past the file
  std::memcpy(huge_len.data(), &lie, 8);
  const std::vector<Case> cases = {{"offsets out of range", with_header(out_of_range), "model.safetensors"},
                                   {"overlapping", with_header(overlap), "model.safetensors"},
                                   {"unknown dtype", with_header(unknown), "F13"},
                                   {"header length beyond the file", huge_len, "model.safetensors"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string hf = dir / "hf";
    fs::remove_all(hf);
    fs::create_directories(hf);
    for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), hf + "/" + e.path().filename().string());
    write_text(hf + "/model.safetensors", c.content);
    const auto r = test::run_binary("convert_checkpoint", {"--from-hf", hf, "--to-native", dir / "native"},
                                    dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(hf + "/model.safetensors"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.fault), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "native/latest_checkpointed_iteration.txt"));
  }
}

// ---- native checkpoints: missing or truncated shard, config not matching the flags ---------------

TEST(BadInput, CheckpointWithMissingOrTruncatedShard) {
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  const std::string save = dir / "ckpt";
  test::run_training(argv0(train_flags(data)), {"--train-iters", "1", "--save", save});
  const std::string ck = save + "/iter_0000001";
  const std::string model = test::read_log(ck + "/model.safetensors"), opt = test::read_log(ck + "/optimizer.safetensors");
  auto load = [&](const std::vector<std::string>& extra) {
    Trainer t(test::parse_flags(plus(argv0(train_flags(data)), plus({"--train-iters", "2", "--load", save}, extra))));
  };
  fs::remove(ck + "/optimizer.safetensors");
  expect_error([&] { load({}); }, {ck + "/optimizer.safetensors", "missing"});
  load({"--no-load-optim"});  // the weights alone still load
  write_text(ck + "/optimizer.safetensors", opt);
  fs::remove(ck + "/model.safetensors");
  expect_error([&] { load({}); }, {ck + "/model.safetensors", "missing"});
  write_text(ck + "/model.safetensors", model.substr(0, model.size() - 100));
  expect_error([&] { load({}); }, {ck + "/model.safetensors", "checksum mismatch"});
  if (fs::exists(test::binary_path("pretrain_difflm"))) {
    const auto r = test::run_binary("pretrain_difflm", plus(train_flags(data), {"--train-iters", "2", "--load", save}),
                                    dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(ck + "/model.safetensors: checksum mismatch"), std::string::npos) << r.output;
  }
  fs::remove(ck + "/state.json");  // the pointer names a directory that is not a checkpoint
  expect_error([&] { load({}); }, {save + "/latest_checkpointed_iteration.txt", "missing or incomplete"});
}

TEST(BadInput, CheckpointConfigNotMatchingTheModelFlags) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  const std::string save = dir / "ckpt";
  test::run_training(argv0(train_flags(data)), {"--train-iters", "1", "--save", save});
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> faults;
  };
  const std::vector<Case> cases = {
      {{"--hidden-size", "64"}, {"does not match the model flags", "hidden_size (flags: 64, checkpoint: 32)"}},
      {{"--num-layers", "2"}, {"num_layers (flags: 2, checkpoint: 1)"}},
      {{"--vocab-size", "100"}, {"vocab_size (flags: 112, checkpoint: 80)"}},
      {{"--model-type", "gpt"}, {"the checkpoint is a difflm model but --model-type is gpt"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags[0]);
    const auto r = test::run_binary("pretrain_difflm",
                                    with(plus(train_flags(data), {"--train-iters", "2", "--load", save}), c.flags),
                                    dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(save + "/iter_0000001"), std::string::npos) << r.output;
    for (const auto& f : c.faults) EXPECT_NE(r.output.find(f), std::string::npos) << f << "\n" << r.output;
  }
}

// ---- impossible flags ----------------------------------------------------------------------------

// Each: exit 1 with an error naming the flag (the parser's own cases are in tests/train).
TEST(BadInput, ImpossibleFlagsThroughThePrograms) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--hidden-size", "abc"}, "--hidden-size"},
      {{"--hidden-size", "30"}, "--num-attention-heads"},
      {{"--seq-length", "0"}, "--seq-length"},
      {{"--micro-batch-size", "0"}, "--micro-batch-size"},
      {{"--global-batch-size", "5"}, "--global-batch-size"},  // not a multiple of --micro-batch-size 2
      {{"--num-layers", "0"}, "--num-layers"},
      {{"--train-iters", "-5"}, "--train-iters"},
      {{"--mask-token", "500"}, "--mask-token"},
      {{"--lr-decay-style", "zigzag"}, "--lr-decay-style"},
      {{"--max-skipped-steps", "-1"}, "--max-skipped-steps"},
      {{"--exit-signal", "SIGKILL"}, "--exit-signal"},
      {{"--data-path", dir / "absent"}, dir / "absent.idx"},
      {{"--lr-warmup-iters"}, "--lr-warmup-iters"},  // no value
  };
  for (const auto& [extra, flag] : cases) {
    SCOPED_TRACE(extra[0] + (extra.size() > 1 ? " " + extra[1] : ""));
    const auto r = test::run_binary("pretrain_difflm", with(plus(train_flags(data), {"--train-iters", "2"}), extra),
                                    dir / "log.txt", {30, -1, ""});
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(flag), std::string::npos) << r.output;
  }
}

// generate and evaluate take --device: an unknown value names the flag; cuda where the build or the
// machine has none says which, naming --device cuda, before any checkpoint is read.
TEST(BadInput, InferenceDeviceFlagThroughThePrograms) {
  MEGADLM_REQUIRE_BINARY("generate");
  MEGADLM_REQUIRE_BINARY("evaluate");
  test::TempDir dir;
  for (const char* program : {"generate", "evaluate"}) {
    SCOPED_TRACE(program);
    auto r = test::run_binary(program, {"--load", dir / "absent", "--device", "tpu"}, dir / "log.txt", {30, -1, ""});
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find("--device: unknown value 'tpu'"), std::string::npos) << r.output;
    if (cuda_available()) continue;  // a GPU is visible: --device cuda is allowed
    r = test::run_binary(program, {"--load", dir / "absent", "--device", "cuda"}, dir / "log.txt", {30, -1, ""});
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find("--device cuda: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(cuda_compiled() ? "no GPU" : "no CUDA backend"), std::string::npos) << r.output;
  }
}
