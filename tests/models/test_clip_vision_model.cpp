// CLIP's vision tower (models/clip_vision_model.h): the gradient of the selected features with respect
// to every parameter by finite differences, the feature layer's selection, freezing (the tower computes no
// gradient, AdamW leaves frozen parameters bit for bit), and the spec's refusals. Parity with
// transformers is tests/checkpoint/test_hf_clip.cpp's.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "grad_check.h"
#include "models/clip_vision_model.h"
#include "optim/adamw.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;

// Images of 8 x 8 in patches of 4 (P = 4, S = 5), hidden 8 in 2 heads, F 12, 2 layers.
TransformerConfig tiny_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = c.num_query_groups = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 12;
  c.attention_mask = MaskType::None;
  return c;
}

ClipVisionOptions tiny_options(int64_t feature_layer) {
  ClipVisionOptions o;
  o.image_size = 8;
  o.patch_size = 4;
  o.feature_layer = feature_layer;
  return o;
}

Tensor pixels(int64_t B, uint64_t seed) {
  Tensor t = Tensor::empty({B, 3, 8, 8}, DType::F32);
  const std::vector<float> v = test::random_vector(t.numel(), seed);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// L = sum(features * R): the backward from dfeatures = R.
RunFn features_loss(ClipVisionModel& m, const Tensor& px) {
  const int64_t n = px.size(0) * m.patches() * m.config().hidden_size;
  auto R = std::make_shared<std::vector<float>>(test::random_vector(n, 41));
  return [&m, px, R, n](Arena&, const Tensor&, Tensor* dx) {
    const ClipVisionModel::Outputs out = m.forward(px, false);
    EXPECT_EQ(out.features.numel(), n);
    double l = 0.0;
    for (int64_t i = 0; i < n; ++i) l += static_cast<double>(out.features.data<float>()[i]) * (*R)[i];
    if (dx) {
      Tensor d = Tensor::empty(out.features.shape(), DType::F32);
      std::copy(R->begin(), R->end(), d.data<float>());
      m.backward(d);
    }
    return l;
  };
}

class ClipVisionGradients : public ::testing::TestWithParam<int64_t> {};

TEST_P(ClipVisionGradients, EveryParameterOfTheSelectedFeaturesMatchesFiniteDifferences) {
  ClipVisionModel m(tiny_config(), tiny_options(GetParam()), ParallelContext::single());
  randomize(m.params(), 40);
  Arena unused;
  check_gradients("CLIP vision tower, feature layer " + std::to_string(GetParam()), m.params(), unused, {}, {},
                  features_loss(m, pixels(2, 42)), 24);
}

// -2: the output of layer 1 of 2 (LLaVA's default); -1: the last layer's; 0: pre_layrnorm's.
INSTANTIATE_TEST_SUITE_P(FeatureLayers, ClipVisionGradients, ::testing::Values(-2, -1, 0));

TEST(ClipVision, TheFeaturesAreTheSelectedHiddenStateWithoutTheClassToken) {
  ClipVisionModel last(tiny_config(), tiny_options(-1), ParallelContext::single());
  ClipVisionModel second(tiny_config(), tiny_options(-2), ParallelContext::single());
  last.params().init(5);
  second.params().init(5);
  const Tensor px = pixels(2, 43);
  const ClipVisionModel::Outputs a = last.forward(px);
  ASSERT_EQ(a.features.shape(), Shape({2 * 4, 8}));
  ASSERT_EQ(a.last_hidden.shape(), Shape({2 * 5, 8}));
  ASSERT_EQ(a.pooled.shape(), Shape({2, 8}));
  // -1: the last hidden state's patch rows.
  for (int64_t b = 0; b < 2; ++b)
    EXPECT_EQ(0, std::memcmp(a.features.data<float>() + b * 4 * 8, a.last_hidden.data<float>() + (b * 5 + 1) * 8,
                             4 * 8 * sizeof(float)));
  // -2 differs from it, and its full forward ends in the same last hidden state.
  const Tensor features_only = second.forward(px, false).features;
  const std::vector<float> f2(features_only.data<float>(), features_only.data<float>() + features_only.numel());
  const ClipVisionModel::Outputs b = second.forward(px);
  EXPECT_EQ(0, std::memcmp(f2.data(), b.features.data<float>(), f2.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(f2.data(), a.features.data<float>(), f2.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.last_hidden.data<float>(), b.last_hidden.data<float>(), a.last_hidden.nbytes()));
}

TEST(ClipVision, AFrozenTowerComputesNoGradientAndAdamWLeavesFrozenParametersBitForBit) {
  ClipVisionModel m(tiny_config(), tiny_options(-1), ParallelContext::single());
  ParamStore& p = m.params();
  randomize(p, 44);
  const Tensor px = pixels(2, 45);
  Tensor d = Tensor::empty({2 * 4, 8}, DType::F32);
  d.fill_(0.5f);
  // Frozen: no gradient at all.
  m.set_frozen(true);
  p.zero_grads();
  m.forward(px, false);
  m.backward(d);
  for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(p.grads()[i], 0.0f) << i;
  // Trained: gradients everywhere before the features; the optimizer freezes the embeddings, pre_layrnorm
  // and layer 0 (weight decay would move their matrices), and updates layer 1. post_layernorm, after the
  // features, has no gradient and no weight decay: it stays as it is either way.
  m.set_frozen(false);
  m.forward(px, false);
  m.backward(d);
  const int first_trained = p.find("encoder.layers.1.input_layernorm.weight");
  ASSERT_GT(first_trained, 0);
  const std::vector<float> before(p.values(), p.values() + p.numel());
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  AdamW opt(p, cfg);
  opt.freeze(0, first_trained);
  EXPECT_TRUE(opt.is_frozen(0));
  EXPECT_FALSE(opt.is_frozen(first_trained));
  opt.step(1e-2);
  for (int id = 0; id < p.count(); ++id) {
    const ParamInfo& info = p.info(id);
    const size_t bytes = static_cast<size_t>(info.shape.numel()) * sizeof(float);
    const bool same = std::memcmp(before.data() + info.offset, p.values() + info.offset, bytes) == 0;
    if (id < first_trained) {
      EXPECT_TRUE(same) << info.name << " is frozen but changed";
      for (int64_t i = 0; i < info.shape.numel(); ++i)
        ASSERT_EQ(opt.exp_avg().data<float>()[info.offset + i], 0.0f) << info.name;
    } else if (info.name.rfind("post_layernorm.", 0) != 0) {
      EXPECT_FALSE(same) << info.name << " is trained but did not change";
    }
  }
  EXPECT_ANY_THROW(opt.freeze(0, p.count() + 1));
}

TEST(ClipVision, RefusesWhatItIsNotBuiltWith) {
  const ParallelContext ctx = ParallelContext::single();
  auto error = [&](TransformerConfig c, ClipVisionOptions o) {
    return test::error_of([&] { ClipVisionModel m(c, o, ctx); });
  };
  EXPECT_NE(error(tiny_config(), tiny_options(3)).find("vision_feature_layer 3"), std::string::npos);
  EXPECT_NE(error(tiny_config(), tiny_options(-4)).find("vision_feature_layer -4"), std::string::npos);
  TransformerConfig rms = tiny_config();
  rms.normalization = NormKind::RMSNorm;
  EXPECT_NE(error(rms, tiny_options(-2)).find("LayerNorm"), std::string::npos);
  TransformerConfig gqa = tiny_config();
  gqa.num_query_groups = 1;
  EXPECT_NE(error(gqa, tiny_options(-2)).find("grouped-query"), std::string::npos);
  ClipVisionOptions odd = tiny_options(-2);
  odd.patch_size = 3;
  EXPECT_NE(error(tiny_config(), odd).find("patch_size 3"), std::string::npos);
  EXPECT_NE(test::error_of([] { projector_type_from_name("mlp3x_gelu"); }).find("--projector-type"),
            std::string::npos);
  EXPECT_EQ(projector_type_from_name(projector_type_name(ProjectorType::Linear)), ProjectorType::Linear);
  EXPECT_EQ(projector_type_from_name("mlp2x_gelu"), ProjectorType::Mlp2xGelu);
}

}  // namespace
}  // namespace megadlm
