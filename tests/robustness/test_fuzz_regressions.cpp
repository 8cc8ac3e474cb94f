// Regression tests for what the libFuzzer targets of fuzz/ found (docs/fuzzing.md): each test feeds
// the input libFuzzer reported, as bytes, to the reader that misbehaved and checks the fixed behaviour.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "tokenizers/byte_level_bpe.h"
#include "tokenizers/tokenizer_hf.h"
#include "test_util.h"

namespace megadlm {
namespace {

using test::error_of;
std::string bytes_of(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

// fuzz_safetensors, first input: a header of 93 bytes (not a multiple of 8, which the format allows)
// puts a BF16 tensor at an odd address, where a load through a uint16_t* is misaligned (UBSan). The
// reader gives misaligned tensors an aligned copy.
TEST(FuzzRegressions, SafetensorsMisalignedBf16) {
  const std::string header = R"({"b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}, "__metadata__": {"k": "v"}})";
  ASSERT_EQ(header.size(), 93u);
  std::string file = bytes_of({0x5d, 0, 0, 0, 0, 0, 0, 0}) + header + bytes_of({0, 1, 2, 3, 4, 5, 6, 7});
  test::TempDir dir;
  write_file_atomic(dir / "m.safetensors", file);
  SafetensorsFile f(dir / "m.safetensors");
  const Tensor view = f.get("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(view.raw()) % 2, 0u) << "a BF16 view must be 2-byte aligned";
  EXPECT_EQ(std::memcmp(view.raw(), file.data() + 8 + 93, 8), 0);
  Tensor out = Tensor::empty(Shape{2, 2}, DType::F32);
  std::fill(out.data<float>(), out.data<float>() + 4, std::nanf(""));
  f.read_into("b", out);
  for (int i = 0; i < 4; ++i) {
    const uint32_t bits = static_cast<uint32_t>((2 * i) | ((2 * i + 1) << 8)) << 16;  // little-endian BF16 -> F32
    float expect;
    std::memcpy(&expect, &bits, 4);
    EXPECT_EQ(out.data<float>()[i], expect) << i;
  }
  EXPECT_EQ(f.metadata().at("k"), "v");
}

// fuzz_safetensors, second input: an empty F32 tensor (shape [0, 4], data_offsets [0, 0]) beside an F16
// one; read_into an empty destination must not call memcpy with a null pointer (UBSan: nonnull argument).
TEST(FuzzRegressions, SafetensorsEmptyTensorReadInto) {
  const std::string header =
      R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]}}  )";
  ASSERT_EQ(header.size(), 0x70u);
  const std::string file = bytes_of({0x70, 0, 0, 0, 0, 0, 0, 0}) + header +
                           bytes_of({0x37, 0x3d, 0x94, 0x3b, 0xa1, 0xb9, 0x10, 0xbd, 0xfc, 0xb8});
  test::TempDir dir;
  write_file_atomic(dir / "m.safetensors", file);
  SafetensorsFile f(dir / "m.safetensors");
  Tensor empty = Tensor::empty(Shape{0, 4}, DType::F32);
  f.read_into("e", empty);  // nothing to copy, no crash
  EXPECT_EQ(f.get("e").numel(), 0);
  Tensor h = Tensor::empty(Shape{5}, DType::F32);
  f.read_into("h", h);
  EXPECT_EQ(h.data<float>()[0], f16_to_f32(0x3d37));  // 1.3037109375
  EXPECT_FLOAT_EQ(h.data<float>()[0], 1.3037109375f);
  EXPECT_THROW(f.read_into("h", empty), Error);  // 5 values do not fit 0
}

// A tokenizer.json with the 256 byte tokens (ids 0..255) and the given added_tokens.
nlohmann::json byte_level_tokenizer(const nlohmann::json& added_tokens) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"added_tokens", added_tokens}};
}

// fuzz_tokenizer_hf: a vocabulary entry with id 999999999 would make ByteLevelBPE size its tables by
// the largest id (16 GB for one token; libFuzzer: malloc beyond -malloc_limit_mb). Ids must be nearly
// dense (below 2 x tokens + 1024).
TEST(FuzzRegressions, TokenizerHugeVocabularyId) {
  const auto j = nlohmann::json::parse(
      R"({"model":{"vocab":{"a":999999999},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}})");
  const std::string msg = error_of([&] { HuggingFaceTokenizer t(j, "huge_id.json"); });
  EXPECT_NE(msg.find("huge_id.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("999999999"), std::string::npos) << msg;
  // Gaps within the bound still load: 256 byte tokens plus one at id 700.
  nlohmann::json ok = byte_level_tokenizer(nlohmann::json::array());
  ok["model"]["vocab"]["<x>"] = 700;
  HuggingFaceTokenizer t(ok, "gap.json");
  EXPECT_EQ(t.token_to_id("<x>"), 700);
  EXPECT_GE(t.vocab_size(), 701);
}

// fuzz_tokenizer_hf: the same through added_tokens (an index slot per id: 4 GB for id 999999999).
TEST(FuzzRegressions, TokenizerHugeAddedTokenId) {
  const auto bad = byte_level_tokenizer(nlohmann::json::parse(R"([{"id":999999999,"content":"<big>"}])"));
  const std::string msg = error_of([&] { HuggingFaceTokenizer t(bad, "huge_added.json"); });
  EXPECT_NE(msg.find("added_tokens[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("999999999"), std::string::npos) << msg;
  const auto ok = byte_level_tokenizer(nlohmann::json::parse(R"([{"id":300,"content":"<sep>","special":true}])"));
  HuggingFaceTokenizer t(ok, "gap_added.json");
  EXPECT_EQ(t.token_to_id("<sep>"), 300);
  EXPECT_EQ(t.encode("a<sep>b"), (std::vector<int32_t>{t.token_to_id("a"), 300, t.token_to_id("b")}));
}

}  // namespace
}  // namespace megadlm
