// The BERT family: bert_model_spec's parameters (post-norm and pre-norm, with and without the binary
// head), every gradient of the whole model by finite differences (MLM + binary losses, a padded batch),
// the padding mask (padded keys invisible: the tokens' logits are those of the unpadded batch), and
// the refusals of what BERT is not built with.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bert_model_fixture.h"
#include "grad_check.h"
#include "models/bert_model.h"
#include "models/model_spec.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;
using test::bert_config;
using test::padded_batch;

TEST(BertSpec, PostNormHasTheEmbeddingNormAndNoFinalNorm) {
  const TransformerConfig cfg = bert_config();
  BertModel m(cfg, model_spec(ModelType::BERT, cfg), ParallelContext::single());
  const ParamStore& s = m.params();
  for (const char* n : {"embed_tokens.weight", "embed_positions.weight", "embed_token_types.weight", "embed_norm.weight",
                        "embed_norm.bias", "layers.1.input_layernorm.bias", "layers.1.self_attn.q_proj.bias",
                        "layers.1.mlp.fc2.bias", "layers.1.post_attention_layernorm.weight", "mlm_head.dense.weight",
                        "mlm_head.norm.bias", "mlm_head.bias", "pooler.dense.weight", "binary_head.bias"})
    EXPECT_GE(s.find(n), 0) << n;
  EXPECT_EQ(s.find("norm.weight"), -1);
  EXPECT_EQ(s.find("lm_head.weight"), -1) << "the MLM decoder is tied to the word embeddings";
  EXPECT_EQ(s.info(s.find("embed_token_types.weight")).shape, (Shape{2, 16}));
  EXPECT_TRUE(m.exact_gelu());
  EXPECT_TRUE(m.has_binary_head());
}

TEST(BertSpec, PreNormAndNoBinaryHead) {
  const TransformerConfig cfg = bert_config();
  BertOptions o;
  o.pre_norm = true;
  o.binary_head = false;
  BertModel m(cfg, bert_model_spec(cfg, o), ParallelContext::single());
  EXPECT_GE(m.params().find("norm.weight"), 0);
  EXPECT_EQ(m.params().find("embed_norm.weight"), -1);
  EXPECT_EQ(m.params().find("pooler.dense.weight"), -1);
  EXPECT_EQ(m.params().find("binary_head.weight"), -1);
  EXPECT_FALSE(m.has_binary_head());
}

TEST(BertSpec, WhatBertIsNotBuiltWithIsRefusedByFlag) {
  TransformerConfig cfg = bert_config();
  cfg.moe.num_experts = 4;
  EXPECT_NE(test::error_of([&] { bert_model_spec(cfg); }).find("--model-type bert is dense only: --num-experts"),
            std::string::npos);
  cfg = bert_config();
  cfg.position_embedding = PositionEmbedding::Rope;
  EXPECT_NE(test::error_of([&] { bert_model_spec(cfg); }).find("learned_absolute"), std::string::npos);
  cfg = bert_config();
  cfg.untie_embeddings_and_output_weights = true;
  EXPECT_NE(test::error_of([&] { bert_model_spec(cfg); }).find("--untie-embeddings-and-output-weights"),
            std::string::npos);
  EXPECT_EQ(model_type_from_name("bert"), ModelType::BERT);
  EXPECT_STREQ(model_type_name(ModelType::BERT), "bert");
}

struct Placement {
  bool pre_norm;
  bool exact_gelu;
};

class BertGradients : public ::testing::TestWithParam<Placement> {};

TEST_P(BertGradients, EveryGradientMatchesFiniteDifferences) {
  const TransformerConfig cfg = bert_config();
  BertOptions o;
  o.pre_norm = GetParam().pre_norm;
  o.exact_gelu = GetParam().exact_gelu;
  BertModel m(cfg, bert_model_spec(cfg, o), ParallelContext::single());
  randomize(m.params(), 90);
  const BertBatch b = padded_batch();
  Arena unused;
  check_gradients(o.pre_norm ? "BERT, pre-norm" : "BERT, post-norm", m.params(), unused, {}, {0},
                  [&](Arena&, const Tensor&, Tensor* dx) {
                    const BertLosses l = dx ? m.forward_backward(b, 1.0f) : m.forward_loss(b);
                    return l.mlm + l.binary;
                  },
                  /*max_samples=*/16);
}

INSTANTIATE_TEST_SUITE_P(Bert, BertGradients,
                         ::testing::Values(Placement{false, true}, Placement{true, false}),
                         [](const auto& info) { return info.param.pre_norm ? "PreNormTanh" : "PostNormErf"; });

TEST(BertPadding, PaddedKeysAreInvisibleToTheTokens) {
  const TransformerConfig cfg = bert_config();
  BertModel m(cfg, model_spec(ModelType::BERT, cfg), ParallelContext::single());
  randomize(m.params(), 91);
  BertBatch padded = padded_batch();
  const BertModel::Logits a = m.forward_logits(padded);
  const std::vector<float> mlm(a.mlm.data<float>(), a.mlm.data<float>() + a.mlm.numel());
  const std::vector<float> nsp(a.binary.data<float>(), a.binary.data<float>() + 4);
  // The second sequence alone, unpadded: its three tokens' logits and its binary logits are the same.
  BertBatch alone;
  alone.B = 1;
  alone.T = 3;
  alone.tokens = {5, 9, 1};
  alone.token_types = {0, 1, 1};
  const BertModel::Logits c = m.forward_logits(alone);
  const int64_t V = cfg.vocab_size;
  for (int64_t i = 0; i < 3 * V; ++i) EXPECT_NEAR(c.mlm.data<float>()[i], mlm[5 * V + i], 1e-5) << i;
  for (int k = 0; k < 2; ++k) EXPECT_NEAR(c.binary.data<float>()[k], nsp[2 + k], 1e-5);
  // Whatever the padded positions hold, the tokens' logits do not move.
  padded.tokens[8] = 13;
  padded.tokens[9] = 4;
  padded.token_types[9] = 1;
  const BertModel::Logits d = m.forward_logits(padded);
  for (int64_t i = 0; i < 8 * V; ++i) EXPECT_EQ(d.mlm.data<float>()[i], mlm[i]) << i;
  // Without the mask the padded keys are seen, and the logits move.
  padded.attention_mask.clear();
  const BertModel::Logits e = m.forward_logits(padded);
  EXPECT_NE(e.mlm.data<float>()[5 * V], mlm[5 * V]);
}

TEST(BertPadding, BadMaskEntriesAndLabelsAreErrors) {
  const TransformerConfig cfg = bert_config();
  BertModel m(cfg, model_spec(ModelType::BERT, cfg), ParallelContext::single());
  BertBatch b = padded_batch();
  b.attention_mask[3] = 2;
  EXPECT_NE(test::error_of([&] { m.forward_loss(b); }).find("attention mask entry 2 at 3"), std::string::npos);
  b = padded_batch();
  b.binary_labels = {1, 2};
  EXPECT_NE(test::error_of([&] { m.forward_loss(b); }).find("binary label 2 at row 1"), std::string::npos);
  b = padded_batch();
  b.mlm_labels.pop_back();
  EXPECT_NE(test::error_of([&] { m.forward_loss(b); }).find("9 MLM labels for 10 tokens"), std::string::npos);
}

}  // namespace
}  // namespace megadlm
