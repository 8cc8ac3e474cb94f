// A model whose vocabulary is padded (config real_vocab_size < vocab_size: the padded rows' logits are
// -inf, nn/lm_head.h) exports to HuggingFace without the padded rows: transformers takes the softmax
// over every row of its vocab_size, so the exported model holds the tokens' rows only and gives the
// probabilities ours gives. The transformers fixture (tests/checkpoint/fixtures/hf_gpt2) padded by five
// rows exports back to the fixture's tensors bit for bit and to its vocab_size.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/hf_convert.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

TEST(HfVocabPadding, ExportDropsThePaddedRows) {
  const std::string src = std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/hf_gpt2";
  test::TempDir tmp;
  const HfCheckpoint ck = read_hf_checkpoint(src);
  const int64_t tokens = ck.info.config.vocab_size, pad = 5;
  HfModelInfo info = ck.info;
  info.config.vocab_size = tokens + pad;
  info.config.real_vocab_size = tokens;
  std::vector<SafetensorsEntry> padded = ck.params;
  for (SafetensorsEntry& e : padded) {
    if (e.name != "embed_tokens.weight") continue;
    const int64_t C = e.tensor.shape()[1];
    Tensor t = Tensor::empty({tokens + pad, C}, DType::F32);
    std::memcpy(t.raw(), e.tensor.raw(), e.tensor.nbytes());
    for (int64_t i = tokens * C; i < (tokens + pad) * C; ++i) t.data<float>()[i] = 3.0f;
    e.tensor = t;
  }
  write_hf_checkpoint(tmp / "out", padded, info, {DType::F32, 0});
  const HfCheckpoint back = read_hf_checkpoint(tmp / "out");
  EXPECT_EQ(back.info.config.vocab_size, tokens);
  EXPECT_EQ(back.info.config.real_vocab_size, 0);
  std::ifstream in(tmp / "out/config.json");
  std::stringstream cfg;
  cfg << in.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(cfg.str())["vocab_size"], tokens);
  ASSERT_EQ(back.params.size(), ck.params.size());
  for (size_t i = 0; i < ck.params.size(); ++i) {
    SCOPED_TRACE(ck.params[i].name);
    EXPECT_EQ(back.params[i].name, ck.params[i].name);
    ASSERT_EQ(back.params[i].tensor.shape(), ck.params[i].tensor.shape());
    EXPECT_EQ(0, std::memcmp(back.params[i].tensor.raw(), ck.params[i].tensor.raw(), ck.params[i].tensor.nbytes()));
  }
}
