// pretrain_difflm --load-hf: model flags from config.json (contradicting flags are errors naming
// them), and the AR -> diffusion adaptation growing the vocabulary for a new mask token.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/hf_convert.h"
#include "core/error.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "train/arguments.h"
#include "train/hf_init.h"

using namespace megadlm;

namespace {

const std::string kQwen3 = std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/hf_qwen3";

void parse(std::vector<std::string> args, TrainArgs& out) {
  args.insert(args.begin(), "pretrain_difflm");
  std::vector<const char*> argv;
  for (const auto& s : args) argv.push_back(s.c_str());
  parse_train_args(static_cast<int>(argv.size()), argv.data(), out);
}

}  // namespace

TEST(HfInit, ModelFlagsComeFromConfigJson) {
  TrainArgs a;
  parse({"--load-hf", kQwen3, "--model-type", "difflm", "--data-path", "x", "--seq-length", "32"}, a);
  EXPECT_EQ(a.load_hf, kQwen3);
  EXPECT_EQ(a.model.num_layers, 2);
  EXPECT_EQ(a.model.hidden_size, 32);
  EXPECT_EQ(a.model.num_query_groups, 2);
  EXPECT_EQ(a.model.kv_channels, 16);
  EXPECT_TRUE(a.model.qk_layernorm);
  EXPECT_EQ(a.model.activation, Activation::SwiGLU);
  EXPECT_EQ(a.model.position_embedding, PositionEmbedding::Rope);
  EXPECT_EQ(a.model.attention_mask, MaskType::None);  // difflm: bidirectional
  TrainArgs g;
  parse({"--load-hf", kQwen3, "--model-type", "gpt", "--data-path", "x", "--seq-length", "32"}, g);
  EXPECT_EQ(g.model.attention_mask, MaskType::Causal);
  // Flags that agree with config.json are accepted.
  TrainArgs ok;
  parse({"--load-hf", kQwen3, "--num-layers", "2", "--swiglu", "--qk-layernorm", "--data-path", "x", "--seq-length", "32"}, ok);
  EXPECT_EQ(ok.model.num_layers, 2);
}

TEST(HfInit, ContradictingFlagsAreErrorsNamingThem) {
  TrainArgs a;
  try {
    parse({"--load-hf", kQwen3, "--num-layers", "3", "--hidden-size", "64", "--normalization", "LayerNorm",
           "--data-path", "x", "--seq-length", "32"},
          a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* s : {"--num-layers (flag: 3, config.json: 2)", "--hidden-size (flag: 64, config.json: 32)",
                          "--normalization", "config.json"})
      EXPECT_NE(m.find(s), std::string::npos) << m << " lacks " << s;
  }
  try {
    parse({"--load-hf", kQwen3, "--data-path", "x", "--seq-length", "128"}, a);
    ADD_FAILURE() << "no error for --seq-length beyond max_position_embeddings";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--seq-length 128"), std::string::npos) << e.what();
  }
}

TEST(HfInit, NewMaskTokenGrowsEmbeddingAndHeadWithMeanRows) {
  const HfCheckpoint ck = read_hf_checkpoint(kQwen3);
  TransformerConfig cfg = ck.info.config;
  const int64_t V0 = cfg.vocab_size, C = cfg.hidden_size;
  cfg.vocab_size = hf_adapted_vocab_size(V0, V0 + 1);  // a tokenizer with one appended mask token
  EXPECT_EQ(cfg.vocab_size, V0 + 1);
  EXPECT_EQ(hf_adapted_vocab_size(V0, V0 - 10), V0);     // an existing id: no growth
  cfg.attention_mask = MaskType::None;
  LanguageModel model(cfg, decoder_model_spec(cfg, difflm_layer_spec(cfg, MaskType::None, 0)), ParallelContext::single());
  model.params().init(1);
  EXPECT_EQ(load_hf_into_model(kQwen3, model), 1);
  for (const char* name : {"embed_tokens.weight", "lm_head.weight"}) {
    SCOPED_TRACE(name);
    const float* got = model.params().value(model.params().find(name)).data<float>();
    const float* src = nullptr;
    for (const auto& e : ck.params)
      if (e.name == name) src = e.tensor.data<float>();
    ASSERT_NE(src, nullptr);
    for (int64_t i = 0; i < V0 * C; ++i) ASSERT_EQ(got[i], src[i]) << i;
    for (int64_t c = 0; c < C; ++c) {
      double mean = 0;
      for (int64_t v = 0; v < V0; ++v) mean += src[v * C + c];
      mean /= static_cast<double>(V0);
      EXPECT_NEAR(got[V0 * C + c], mean, 1e-6);
    }
  }
  // Everything else is the checkpoint's, bit for bit.
  for (const auto& e : ck.params) {
    if (e.name == "embed_tokens.weight" || e.name == "lm_head.weight") continue;
    const Tensor t = model.params().value(model.params().find(e.name));
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], e.tensor.data<float>()[i]) << e.name;
  }
}
