// The T5 family: the relative position buckets against HuggingFace's (values printed by transformers'
// T5Attention._relative_position_bucket), T5's attention against a double-precision reference (bias,
// padding, causal mask, no score scaling, inner size != hidden), every gradient of the whole model by
// finite differences with the tied, scaled output (v1.0) and the untied one (v1.1) on a padded batch
// (the ReLU block alone), the padding (padded encoder keys change nothing), and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "grad_check.h"
#include "models/t5_model.h"
#include "models/t5_model_fixture.h"
#include "nn/t5_attention.h"
#include "nn/t5_feed_forward.h"
#include "nn/t5_relative_bias.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;
using test::t5_batch;
using test::t5_config;
using test::t5_options;

TEST(T5RelativeBuckets, MatchHuggingFace) {
  const std::vector<int64_t> rel = {-200, -128, -100, -64, -40, -20, -17, -16, -15, -9, -8, -7, -3, -1, 0,
                                    1,    2,    7,    8,   9,   15,  16,  20,  40,  64, 100, 127, 128, 300};
  struct Case {
    bool bidirectional;
    int64_t buckets, max_distance;
    std::vector<int64_t> want;
  };
  const Case cases[] = {
      {true, 32, 128, {15, 15, 15, 14, 12, 10, 10, 10, 9, 8, 8, 7, 3, 1, 0, 17, 18, 23, 24, 24, 25, 26, 26, 28, 30, 31, 31, 31, 31}},
      {true, 8, 16, {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1, 0, 5, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}},
      {false, 32, 128, {31, 31, 30, 26, 23, 17, 16, 16, 15, 9, 8, 7, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
      {false, 8, 16, {7, 7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 5, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}};
  for (const Case& c : cases)
    for (size_t i = 0; i < rel.size(); ++i)
      EXPECT_EQ(t5_relative_position_bucket(rel[i], c.bidirectional, c.buckets, c.max_distance), c.want[i])
          << "relative " << rel[i] << (c.bidirectional ? " bidirectional " : " unidirectional ") << c.buckets << "/"
          << c.max_distance;
}

// y = o(softmax(q k^T + bias, hidden keys excluded) v) in double, from the module's own weights.
std::vector<double> attention_reference(const ParamStore& s, const std::string& name, const std::vector<float>& x,
                                        const std::vector<float>& kv, const T5AttentionGeometry& g, int64_t C, int64_t H,
                                        int64_t D) {
  const int64_t HD = H * D;
  auto project = [&](const char* w, const std::vector<float>& in, int64_t rows, int64_t out, int64_t inner) {
    const float* W = s.value(s.find(name + "." + w + ".weight")).data<float>();
    std::vector<double> y(static_cast<size_t>(rows * out), 0.0);
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < inner; ++i) y[n * out + o] += static_cast<double>(in[n * inner + i]) * W[o * inner + i];
    return y;
  };
  const auto q = project("q_proj", x, g.B * g.T, HD, C), k = project("k_proj", kv, g.B * g.S, HD, C),
             v = project("v_proj", kv, g.B * g.S, HD, C);
  std::vector<float> att(static_cast<size_t>(g.B * g.T * HD));
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < g.T; ++i) {
        std::vector<double> p(static_cast<size_t>(g.S));
        double mx = -1e300, sum = 0.0;
        for (int64_t j = 0; j < g.S; ++j) {
          const bool seen = (!g.key_mask || g.key_mask[b * g.S + j]) && (!g.causal || j <= i);
          double e = -std::numeric_limits<double>::infinity();
          if (seen) {
            e = g.bias ? g.bias[(h * g.T + i) * g.S + j] : 0.0;
            for (int64_t d = 0; d < D; ++d) e += q[(b * g.T + i) * HD + h * D + d] * k[(b * g.S + j) * HD + h * D + d];
          }
          p[j] = e;
          mx = std::fmax(mx, e);
        }
        for (double& e : p) sum += e = std::exp(e - mx);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < g.S; ++j) o += p[j] / sum * v[(b * g.S + j) * HD + h * D + d];
          att[(b * g.T + i) * HD + h * D + d] = static_cast<float>(o);
        }
      }
  return project("o_proj", att, g.B * g.T, C, HD);
}

TEST(T5Attention, MatchesDoubleReferenceWithBiasPaddingAndCausalMask) {
  const TransformerConfig cfg = t5_config(false);
  const int64_t C = cfg.hidden_size, H = cfg.num_attention_heads, D = cfg.kv_channels;
  const ParallelContext ctx = ParallelContext::single();
  ParamStore s;
  T5Attention attn(s, ctx, "attn", cfg);
  s.finalize();
  randomize(s, 5);
  const int64_t B = 2, T = 5, S = 6;
  const std::vector<float> x = test::random_vector(B * T * C, 6), kv = test::random_vector(B * S * C, 7);
  const std::vector<float> bias = test::random_vector(H * T * T, 8);
  const std::vector<int32_t> kmask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, qmask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  const T5AttentionGeometry geos[] = {{B, T, T, bias.data(), qmask.data(), true},    // decoder self-attention
                                      {B, T, S, nullptr, kmask.data(), false},       // cross-attention
                                      {B, T, T, bias.data(), nullptr, false}};       // encoder, no padding
  for (const T5AttentionGeometry& g : geos) {
    Arena arena;
    Tensor xt = Tensor::empty({B * T, C}, DType::F32);
    std::copy(x.begin(), x.end(), xt.data<float>());
    const std::vector<float>& kvv = g.S == T ? x : kv;
    Tensor kvt = Tensor::empty({B * g.S, C}, DType::F32);
    std::copy(kvv.begin(), kvv.end(), kvt.data<float>());
    const Tensor y = attn.forward(arena, xt, g.S == T ? xt : kvt, g);
    const std::vector<double> want = attention_reference(s, "attn", x, kvv, g, C, H, D);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(y.data<float>()[i], want[i], 1e-5 * (1.0 + std::fabs(want[i]))) << "element " << i;
  }
}

class T5ModelStyles : public ::testing::TestWithParam<bool> {};  // v1.1 or v1.0

TEST_P(T5ModelStyles, ParametersAreTheSpecs) {
  const bool v11 = GetParam();
  const TransformerConfig cfg = t5_config(v11);
  T5Model m(cfg, t5_options(cfg, v11), ParallelContext::single());
  const ParamStore& s = m.params();
  EXPECT_GE(s.find("encoder.layers.0.self_attn.relative_attention_bias.weight"), 0);
  EXPECT_GE(s.find("decoder.layers.0.self_attn.relative_attention_bias.weight"), 0);
  EXPECT_EQ(s.find("encoder.layers.1.self_attn.relative_attention_bias.weight"), -1) << "one table a stack";
  EXPECT_EQ(s.find("encoder.layers.0.cross_attn.q_proj.weight"), -1);
  EXPECT_GE(s.find("decoder.layers.2.cross_attn.q_proj.weight"), 0);
  EXPECT_EQ(s.find("lm_head.weight") >= 0, v11);
  EXPECT_EQ(s.find("decoder.layers.1.mlp.wi.weight") >= 0, !v11);
  EXPECT_EQ(s.find("decoder.layers.1.mlp.wi_1.weight") >= 0, v11);
  EXPECT_EQ(s.value(s.find("encoder.layers.1.self_attn.q_proj.weight")).shape(), Shape({24, 16}));
  EXPECT_EQ(s.value(s.find("encoder.norm.weight")).shape(), Shape({16}));
}

// Both output styles, tied and scaled (v1.0) and untied (v1.1), with the gated feed-forward: ReLU's
// kinks defeat finite differences across a whole model (a probe that moves any of its hundreds of
// pre-activations across zero is off by the jump in slope), so the ReLU block is checked alone below,
// its pre-activations kept away from zero.
TEST_P(T5ModelStyles, GradientsMatchFiniteDifferences) {
  const bool v11 = GetParam();
  const TransformerConfig cfg = t5_config(v11);
  T5Options opt = t5_options(cfg, v11);
  opt.feed_forward = T5FeedForward::GatedGelu;
  T5Model m(cfg, opt, ParallelContext::single());
  EXPECT_EQ(m.tied(), !v11);
  EXPECT_EQ(m.options().scale_output, !v11);
  randomize(m.params(), 92);
  const T5Batch batch = t5_batch();
  Arena arena;
  check_gradients(v11 ? "t5, untied output" : "t5, tied scaled output", m.params(), arena, {}, {0},
                  [&](Arena&, const Tensor&, Tensor* dx) {
                    return dx ? m.forward_backward(batch, 1.0f) : m.forward_loss(batch);
                  },
                  /*max_samples=*/12);
}

TEST(T5FeedForwardBlock, ReluGradientsMatchFiniteDifferencesAwayFromTheKinks) {
  const TransformerConfig cfg = t5_config(false);
  const ParallelContext ctx = ParallelContext::single();
  ParamStore s;
  T5FeedForwardBlock ff(s, ctx, "mlp", cfg, T5FeedForward::Relu);
  s.finalize();
  randomize(s, 3);
  const int64_t N = 6, C = cfg.hidden_size, F = cfg.ffn_hidden_size;
  std::vector<float> x = test::random_vector(N * C, 4);
  // A probe moves a pre-activation wi x by kStep times one |x| or one |wi| (at most 1e-2): none may be
  // that close to zero, or the test would measure the kink.
  const float* wi = s.value(s.find("mlp.wi.weight")).data<float>();
  double closest = 1e30;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      double h = 0.0;
      for (int64_t c = 0; c < C; ++c) h += static_cast<double>(wi[f * C + c]) * x[n * C + c];
      closest = std::fmin(closest, std::fabs(h));
    }
  ASSERT_GT(closest, 2e-2) << "the seed puts a pre-activation at a kink";
  Arena arena;
  check_gradients("t5 relu feed-forward", s, arena, x, {N, C},
                  sum_times_random(N * C, 9, [&](Arena& a, const Tensor& in) { return ff.forward(a, in); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { ff.backward(a, dy, dx); }));
}

TEST_P(T5ModelStyles, PaddedEncoderRowsChangeNothing) {
  const bool v11 = GetParam();
  const TransformerConfig cfg = t5_config(v11);
  T5Model m(cfg, t5_options(cfg, v11), ParallelContext::single());
  randomize(m.params(), 93);
  T5Batch a = t5_batch();
  const Tensor la = m.forward_logits(a);
  const std::vector<float> first(la.data<float>(), la.data<float>() + la.numel());
  for (int64_t i = a.S + 4; i < 2 * a.S; ++i) a.encoder_tokens[i] = (a.encoder_tokens[i] + 5) % 23;
  const Tensor lb = m.forward_logits(a);
  for (int64_t i = 0; i < lb.numel(); ++i) ASSERT_EQ(lb.data<float>()[i], first[i]) << i;
  a.encoder_mask.assign(a.encoder_mask.size(), 1);  // and the mask does mask: unpadded, they count
  const Tensor lc = m.forward_logits(a);
  double diff = 0.0;
  for (int64_t i = 0; i < lc.numel(); ++i) diff = std::fmax(diff, std::fabs(lc.data<float>()[i] - first[i]));
  EXPECT_GT(diff, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Styles, T5ModelStyles, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "V11GatedGeluUntied" : "V10ReluTied"; });

TEST(T5Model, RefusesWhatItIsNotBuiltWith) {
  TransformerConfig c = t5_config(false);
  c.add_bias_linear = true;
  EXPECT_THROW(T5Model(c, t5_options(c, false), ParallelContext::single()), Error);
  c = t5_config(false);
  c.normalization = NormKind::LayerNorm;
  EXPECT_THROW(T5Model(c, t5_options(c, false), ParallelContext::single()), Error);
  c = t5_config(false);
  c.moe.num_experts = 4;
  EXPECT_THROW(t5_model_spec(c, t5_options(c, false)), Error);
  c = t5_config(false);
  T5Options o = t5_options(c, false);
  o.relative_attention_max_distance = 3;
  EXPECT_THROW(T5Model(c, o, ParallelContext::single()), Error);
  T5Model m(t5_config(false), t5_options(t5_config(false), false), ParallelContext::single());
  T5Batch b = t5_batch();
  b.labels[0] = 23;
  try {
    m.forward_loss(b);
    FAIL() << "a label outside the vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 23"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t5_feed_forward_from_name("gated-silu", "config.json"), Error);
}

}  // namespace
}  // namespace megadlm
