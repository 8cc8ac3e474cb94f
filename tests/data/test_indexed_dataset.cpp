// Megatron MMIDIDX .bin/.idx: the reader against a fixture written by numpy in Megatron's layout
// (tools/reference/make_megatron_idx.py), the writer byte for byte against the same fixture, round
// trips in every token dtype, and every kind of corruption -> Error naming the file and the fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "data/indexed_dataset.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::error_of;
const std::string kFixtures = std::string(MEGADLM_SOURCE_DIR) + "/tests/data/fixtures/";

using test::TempDir;
using test::entries_of;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

nlohmann::json expected_fixtures() {
  std::ifstream f(kFixtures + "megatron_small_expected.json");
  return nlohmann::json::parse(f);
}

// The error message of f(), or "" when it does not throw Error.
}  // namespace

TEST(IndexedDataset, ReadsMegatronFixture) {
  const nlohmann::json exp = expected_fixtures();
  for (const std::string name : {"uint16", "int32"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& e = exp.at(name);
    const IndexedDataset d(kFixtures + "megatron_small_" + name);
    EXPECT_EQ(static_cast<int>(d.dtype()), e.at("dtype_code").get<int>());
    const auto& docs = e.at("documents");
    ASSERT_EQ(d.num_documents(), static_cast<int64_t>(docs.size()));
    int64_t seq = 0, tokens = 0;
    for (size_t doc = 0; doc < docs.size(); ++doc) {
      EXPECT_EQ(d.document_index(static_cast<int64_t>(doc)), seq);
      for (const auto& s : docs[doc]) {
        const std::vector<int32_t> want = s.get<std::vector<int32_t>>();
        EXPECT_EQ(d.get(seq), want) << "sequence " << seq;
        EXPECT_EQ(d.sequence_length(seq), static_cast<int32_t>(want.size()));
        tokens += static_cast<int64_t>(want.size());
        ++seq;
      }
    }
    EXPECT_EQ(d.document_index(d.num_documents()), seq);
    EXPECT_EQ(d.num_sequences(), seq);
    EXPECT_EQ(d.total_tokens(), tokens);
    // A slice from the middle of a sequence.
    std::vector<int32_t> part(3, -7);
    d.read(4, 4, 3, part.data());  // sequence 4 has 29 tokens
    const std::vector<int32_t> whole = d.get(4);
    EXPECT_EQ(part, std::vector<int32_t>(whole.begin() + 4, whole.begin() + 7));
  }
}

TEST(IndexedDataset, WriterReproducesMegatronFixtureByteForByte) {
  const nlohmann::json exp = expected_fixtures();
  TempDir dir("writer_fixture");
  for (const std::string name : {"uint16", "int32"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& e = exp.at(name);
    const IndexDType dtype = optimal_index_dtype(e.at("vocab_size").get<int64_t>());
    EXPECT_EQ(static_cast<int>(dtype), e.at("dtype_code").get<int>());  // Megatron's choice by vocab size
    const std::string prefix = dir / name;
    {
      IndexedDatasetWriter w(prefix, dtype);
      for (const auto& doc : e.at("documents")) {
        std::vector<int32_t> tokens, lengths;
        for (const auto& s : doc) {
          const auto v = s.get<std::vector<int32_t>>();
          tokens.insert(tokens.end(), v.begin(), v.end());
          lengths.push_back(static_cast<int32_t>(v.size()));
        }
        w.add_document(tokens.data(), static_cast<int64_t>(tokens.size()), lengths);
      }
      w.finalize();
    }
    EXPECT_EQ(read_bytes(prefix + ".idx"), read_bytes(kFixtures + "megatron_small_" + name + ".idx"));
    EXPECT_EQ(read_bytes(prefix + ".bin"), read_bytes(kFixtures + "megatron_small_" + name + ".bin"));
  }
}

TEST(IndexedDataset, RoundTripsEveryTokenDtype) {
  TempDir dir("roundtrip");
  struct Case {
    IndexDType dtype;
    int32_t max_id;
  };
  const Case cases[] = {{IndexDType::U8, 255},     {IndexDType::I8, 127},  {IndexDType::I16, 32767},
                        {IndexDType::U16, 65535},  {IndexDType::I32, 2147483647}, {IndexDType::I64, 2147483647}};
  CounterRng rng(11, RngPurpose::Test);
  for (const Case& c : cases) {
    SCOPED_TRACE(index_dtype_name(c.dtype));
    const std::string prefix = dir / index_dtype_name(c.dtype);
    std::vector<std::vector<int32_t>> docs;
    for (int d = 0; d < 37; ++d) {
      const int len = d % 9 == 4 ? 0 : 1 + static_cast<int>(rng.uniform(d, 0) * 61);
      std::vector<int32_t> doc(len);
      for (int k = 0; k < len; ++k)
        doc[k] = static_cast<int32_t>(static_cast<double>(rng.uniform_double(d, 1 + k)) * c.max_id);
      if (len > 0) doc[0] = c.max_id;  // the edges of the range survive
      if (len > 1) doc[1] = 0;
      docs.push_back(doc);
    }
    {
      IndexedDatasetWriter w(prefix, c.dtype);
      for (const auto& doc : docs) w.add_document(doc);
      EXPECT_EQ(w.num_documents(), 37);
      w.finalize();
    }
    const IndexedDataset d(prefix);
    EXPECT_EQ(d.dtype(), c.dtype);
    ASSERT_EQ(d.num_documents(), 37);
    int64_t seq = 0;
    for (int doc = 0; doc < 37; ++doc) {
      const int64_t b = d.document_index(doc), e = d.document_index(doc + 1);
      if (docs[doc].empty()) {
        EXPECT_EQ(e, b) << "an empty document has no sequence";
        continue;
      }
      ASSERT_EQ(e, b + 1);
      ASSERT_EQ(b, seq);
      EXPECT_EQ(d.get(seq), docs[doc]);
      EXPECT_EQ(d.sequence_pointer(seq) % static_cast<int64_t>(index_dtype_size(c.dtype)), 0);
      ++seq;
    }
    EXPECT_EQ(d.num_sequences(), seq);
  }
}

TEST(IndexedDataset, EmptyDatasetIsValid) {
  TempDir dir("empty");
  {
    IndexedDatasetWriter w(dir / "none", IndexDType::U16);
    w.finalize();
  }
  const IndexedDataset d(dir / "none");
  EXPECT_EQ(d.num_sequences(), 0);
  EXPECT_EQ(d.num_documents(), 0);
  EXPECT_EQ(d.document_index(0), 0);
  EXPECT_EQ(read_bytes(dir / "none.idx").size(), 34u + 8u);  // header + the leading 0
  EXPECT_TRUE(read_bytes(dir / "none.bin").empty());
}

TEST(IndexedDataset, WriterLeavesNothingUnlessFinalized) {
  TempDir dir("unfinalized");
  {
    IndexedDatasetWriter w(dir / "x", IndexDType::U16);
    w.add_document(std::vector<int32_t>{1, 2, 3});
    EXPECT_FALSE(entries_of(dir.str()).empty());  // the temporary .bin exists while writing
  }
  EXPECT_TRUE(entries_of(dir.str()).empty());
  // A token that does not fit the dtype is an Error naming it, and leaves nothing behind either.
  {
    IndexedDatasetWriter w(dir / "y", IndexDType::U16);
    const std::string msg = error_of([&] { w.add_document(std::vector<int32_t>{1, 70000}); });
    EXPECT_NE(msg.find("70000"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir / "y"), std::string::npos) << msg;
  }
  EXPECT_TRUE(entries_of(dir.str()).empty());
}

TEST(IndexedDataset, ReadOutsideASequenceIsAnError) {
  const IndexedDataset d(kFixtures + "megatron_small_uint16");
  std::vector<int32_t> out(64);
  EXPECT_NE(error_of([&] { d.read(0, 5, 3, out.data()); }).find("outside"), std::string::npos);
  EXPECT_NE(error_of([&] { d.read(-1, 0, 1, out.data()); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { d.get(d.num_sequences()); }).find("out of range"), std::string::npos);
}

// Each corruption of a copy of the fixture must be an Error naming the file at fault and the fault.
TEST(IndexedDataset, EveryCorruptionIsAnErrorNamingTheFile) {
  TempDir dir("corrupt");
  const std::vector<uint8_t> idx0 = read_bytes(kFixtures + "megatron_small_uint16.idx");
  const std::vector<uint8_t> bin0 = read_bytes(kFixtures + "megatron_small_uint16.bin");
  uint64_t s = 0, d = 0;
  std::memcpy(&s, idx0.data() + 18, 8);
  std::memcpy(&d, idx0.data() + 26, 8);
  const size_t lengths_at = 34, pointers_at = 34 + 4 * s, docs_at = pointers_at + 8 * s;
  auto put64 = [](std::vector<uint8_t>& b, size_t at, int64_t v) { std::memcpy(b.data() + at, &v, 8); };
  auto put32 = [](std::vector<uint8_t>& b, size_t at, int32_t v) { std::memcpy(b.data() + at, &v, 4); };

  struct Corruption {
    std::string name;
    std::function<void(std::vector<uint8_t>& idx, std::vector<uint8_t>& bin)> apply;
    std::string fault;       // expected in the message
    bool names_bin = false;  // the message names the .bin rather than the .idx
  };
  const std::vector<Corruption> cases = {
      {"wrong magic", [](auto& i, auto&) { i[3] = 'X'; }, "bad magic"},
      {"version 2", [&](auto& i, auto&) { put64(i, 9, 2); }, "version 2"},
      {"dtype code 0", [](auto& i, auto&) { i[17] = 0; }, "unknown dtype code 0"},
      {"dtype code 9", [](auto& i, auto&) { i[17] = 9; }, "unknown dtype code 9"},
      {"float dtype", [](auto& i, auto&) { i[17] = 6; }, "cannot hold token ids"},
      {"sequence count beyond the file", [&](auto& i, auto&) { put64(i, 18, int64_t(s + 1)); }, "header claims"},
      {"huge sequence count", [&](auto& i, auto&) { put64(i, 18, int64_t(1) << 62); }, "header claims"},
      {"huge document count", [&](auto& i, auto&) { put64(i, 26, int64_t(-1)); }, "more than 2^64"},
      {"sequence count too small", [&](auto& i, auto&) { put64(i, 18, int64_t(s - 1)); }, "describes"},
      {"trailing bytes", [](auto& i, auto&) { i.insert(i.end(), 3, 0); }, "trailing"},
      {"truncated .idx", [](auto& i, auto&) { i.resize(i.size() - 8); }, "header claims"},
      {"truncated header", [](auto& i, auto&) { i.resize(20); }, "truncated header"},
      {"empty .idx", [](auto& i, auto&) { i.clear(); }, "empty file"},
      {"negative length", [&](auto& i, auto&) { put32(i, lengths_at + 4, -3); }, "negative length"},
      {"pointer past the .bin", [&](auto& i, auto& b) { put64(i, pointers_at + 8 * (s - 1), int64_t(b.size())); },
       "beyond the end", true},
      {"negative pointer", [&](auto& i, auto&) { put64(i, pointers_at + 8, -2); }, "negative byte offset"},
      {"misaligned pointer", [&](auto& i, auto&) { put64(i, pointers_at + 8, 1); }, "not a multiple"},
      {"length past the .bin", [&](auto& i, auto&) { put32(i, lengths_at + 4 * (s - 1), 1 << 20); }, "beyond the end",
       true},
      {"truncated .bin", [](auto&, auto& b) { b.resize(b.size() - 2); }, "beyond the end", true},
      {"empty .bin", [](auto&, auto& b) { b.clear(); }, "beyond the end", true},
      {"document index not from 0", [&](auto& i, auto&) { put64(i, docs_at, 1); }, "starts at 1"},
      {"document index decreasing", [&](auto& i, auto&) { put64(i, docs_at + 8 * 2, 0); put64(i, docs_at + 8, 2); },
       "decreases"},
      {"document index not ending at S", [&](auto& i, auto&) { put64(i, docs_at + 8 * (d - 1), int64_t(s - 1)); },
       "ends at"},
  };
  for (const Corruption& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> idx = idx0, bin = bin0;
    c.apply(idx, bin);
    const std::string prefix = dir / "bad";
    write_bytes(prefix + ".idx", idx);
    write_bytes(prefix + ".bin", bin);
    const std::string msg = error_of([&] { IndexedDataset x(prefix); });
    ASSERT_FALSE(msg.empty()) << "no Error";
    EXPECT_NE(msg.find(prefix + (c.names_bin ? ".bin" : ".idx")), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.fault), std::string::npos) << msg;
  }
  // Missing files.
  const std::string prefix = dir / "bad";
  write_bytes(prefix + ".idx", idx0);
  fs::remove(prefix + ".bin");
  std::string msg = error_of([&] { IndexedDataset x(prefix); });
  EXPECT_NE(msg.find(prefix + ".bin: cannot open"), std::string::npos) << msg;
  msg = error_of([&] { IndexedDataset x(dir / "absent"); });
  EXPECT_NE(msg.find(dir / "absent.idx"), std::string::npos) << msg;
}

TEST(IndexedDataset, NegativeTokenInTheBinIsAnErrorOnRead) {
  TempDir dir("negative");
  {
    IndexedDatasetWriter w(dir / "neg", IndexDType::I32);
    w.add_document(std::vector<int32_t>{4, -5, 6});
    w.finalize();
  }
  const IndexedDataset d(dir / "neg");
  const std::string msg = error_of([&] { d.get(0); });
  EXPECT_NE(msg.find("-5"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir / "neg.bin"), std::string::npos) << msg;
}
