// BERT's heads and its GELU: the exact (erf) GELU of the MLP, the MLM head (tied decoder, output bias,
// loss over the labelled rows only) and the pooler with the binary head. Each forward against a naive
// double reference, each gradient by finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "grad_check.h"
#include "nn/bert_heads.h"
#include "nn/gelu_exact.h"
#include "nn/mlp.h"
#include "nn/bert_reference.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;

using test::layernorm;
using test::param;

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// ---- the exact GELU --------------------------------------------------------------------------------

TEST(ExactGelu, MatchesErfAndItsDerivative) {
  const std::vector<float> x = test::random_vector(64, 9, -4.0f, 4.0f);
  Tensor in = Tensor::empty({64}, DType::F32), out = Tensor::empty({64}, DType::F32),
         d = Tensor::empty({64}, DType::F32), ones = Tensor::empty({64}, DType::F32);
  std::copy(x.begin(), x.end(), in.data<float>());
  ones.fill_(1.0f);
  gelu_exact_forward(out, in);
  gelu_exact_backward(d, in, ones);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(out.data<float>()[i], gelu_erf(x[i]), 1e-6);
    const double h = 1e-4, numeric = (gelu_erf(x[i] + h) - gelu_erf(x[i] - h)) / (2 * h);
    EXPECT_NEAR(d.data<float>()[i], numeric, 1e-5);
  }
}

TEST(ExactGelu, TheMlpTakesItAndItsGradientsMatchFiniteDifferences) {
  const TransformerConfig cfg = test::small_bert_config();
  const ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  MLP mlp(store, ctx, "mlp", cfg, Activation::Gelu, cfg.ffn_hidden_size, 0.02f, HostActivation::GeluErf);
  store.finalize();
  randomize(store, 10);
  const std::vector<float> x0 = test::random_vector(4 * 8, 11, -2.0f, 2.0f);
  // The forward against x -> fc2(gelu_erf(fc1(x))) in double.
  Arena arena;
  Tensor x = Tensor::empty({4, 8}, DType::F32);
  std::copy(x0.begin(), x0.end(), x.data<float>());
  const Tensor y = mlp.forward(arena, x);
  const std::vector<double> ref = test::mlp_reference(store, "mlp", x0, 8, 12, gelu_erf);
  for (int i = 0; i < 4 * 8; ++i) EXPECT_NEAR(y.data<float>()[i], ref[i], 1e-5);
  check_gradients("MLP with the exact GELU", store, arena, x0, {4, 8},
                  sum_times_random(32, 12, [&](Arena& a, const Tensor& in) { return mlp.forward(a, in); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { mlp.backward(a, dy, dx); }));
}

// ---- the MLM head ---------------------------------------------------------------------------------

struct MlmCase {
  TransformerConfig cfg = test::small_bert_config();
  ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  MLMHead head;
  int wte = -1;
  explicit MlmCase(bool exact) {
    wte = store.add("embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size}, Init::Normal, 0.02f);
    head = MLMHead(store, ctx, cfg, wte, exact);
    store.finalize();
    randomize(store, 20);
  }
};

// The MLM loss in double: sum over labelled rows of CE(LayerNorm(gelu(x Wd^T + bd)) E^T + b).
double naive_mlm_loss(const ParamStore& s, const std::vector<float>& x, const std::vector<int32_t>& labels, int64_t C,
                      int64_t V, bool exact) {
  const float *wd = param(s, "mlm_head.dense.weight"), *bd = param(s, "mlm_head.dense.bias"),
              *E = param(s, "embed_tokens.weight"), *b = param(s, "mlm_head.bias");
  double total = 0;
  for (size_t n = 0; n < labels.size(); ++n) {
    if (labels[n] == kMlmIgnore) continue;
    std::vector<double> a(C);
    for (int64_t o = 0; o < C; ++o) {
      double h = bd[o];
      for (int64_t c = 0; c < C; ++c) h += static_cast<double>(wd[o * C + c]) * x[n * C + c];
      a[o] = exact ? gelu_erf(h) : 0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h)));
    }
    const std::vector<double> t = layernorm(a, param(s, "mlm_head.norm.weight"), param(s, "mlm_head.norm.bias"), 1e-5);
    std::vector<double> z(V);
    double mx = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      z[v] = b[v];
      for (int64_t c = 0; c < C; ++c) z[v] += t[c] * E[v * C + c];
      mx = std::max(mx, z[v]);
    }
    double se = 0;
    for (double zv : z) se += std::exp(zv - mx);
    total += mx + std::log(se) - z[labels[n]];
  }
  return total;
}

class MlmHeadTest : public ::testing::TestWithParam<bool> {};

TEST_P(MlmHeadTest, LossOverLabelledRowsMatchesANaiveDoubleReference) {
  MlmCase k(GetParam());
  const std::vector<float> x = test::random_vector(5 * 8, 21, -1.5f, 1.5f);
  const std::vector<int32_t> labels{3, kMlmIgnore, 12, kMlmIgnore, 0};
  Arena arena;
  Tensor xt = Tensor::empty({5, 8}, DType::F32);
  std::copy(x.begin(), x.end(), xt.data<float>());
  const double got = k.head.loss(arena, xt, labels.data(), nullptr, 1.0f, nullptr);
  const double want = naive_mlm_loss(k.store, x, labels, 8, 13, GetParam());
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want));
  // The unlabelled rows change nothing: their logits may be anything.
  std::vector<float> x2 = x;
  for (int c = 0; c < 8; ++c) x2[1 * 8 + c] = 9.0f, x2[3 * 8 + c] = -7.0f;
  std::copy(x2.begin(), x2.end(), xt.data<float>());
  arena.reset();
  EXPECT_EQ(k.head.loss(arena, xt, labels.data(), nullptr, 1.0f, nullptr), got);
}

TEST_P(MlmHeadTest, GradientsMatchFiniteDifferencesWithTheTiedDecoder) {
  MlmCase k(GetParam());
  const std::vector<int32_t> labels{3, kMlmIgnore, 12, kMlmIgnore, 0};
  Arena arena;
  check_gradients(GetParam() ? "MLM head, exact GELU" : "MLM head, tanh GELU", k.store, arena,
                  test::random_vector(5 * 8, 22, -1.5f, 1.5f), {5, 8}, [&](Arena& a, const Tensor& x, Tensor* dx) {
                    return k.head.loss(a, x, labels.data(), nullptr, 1.0f, dx);
                  });
}

TEST_P(MlmHeadTest, UnlabelledRowsGetZeroGradientAndNoLabelsNoLoss) {
  MlmCase k(GetParam());
  const std::vector<int32_t> labels{3, kMlmIgnore, 12, kMlmIgnore, 0}, none(5, kMlmIgnore);
  const std::vector<float> x = test::random_vector(5 * 8, 23, -1.5f, 1.5f);
  Arena arena;
  Tensor xt = Tensor::empty({5, 8}, DType::F32), dx = Tensor::empty({5, 8}, DType::F32);
  std::copy(x.begin(), x.end(), xt.data<float>());
  dx.fill_(std::nanf(""));
  k.head.loss(arena, xt, labels.data(), nullptr, 1.0f, &dx);
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(dx.data<float>()[1 * 8 + c], 0.0f);
    EXPECT_EQ(dx.data<float>()[3 * 8 + c], 0.0f);
    EXPECT_NE(dx.data<float>()[0 * 8 + c], 0.0f);
  }
  k.store.zero_grads();
  dx.fill_(std::nanf(""));
  arena.reset();
  EXPECT_EQ(k.head.loss(arena, xt, none.data(), nullptr, 1.0f, &dx), 0.0);
  for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_EQ(dx.data<float>()[i], 0.0f);
  for (int64_t i = 0; i < k.store.numel(); ++i) EXPECT_EQ(k.store.grads()[i], 0.0f);
}

TEST_P(MlmHeadTest, LabelsOtherThanMinusOneOutsideTheVocabularyAreErrors) {
  MlmCase k(GetParam());
  const std::vector<int32_t> labels{3, -100, 12, kMlmIgnore, 0};
  Arena arena;
  Tensor xt = Tensor::zeros({5, 8}, DType::F32);
  EXPECT_NE(test::error_of([&] { k.head.loss(arena, xt, labels.data(), nullptr, 1.0f, nullptr); })
                .find("MLM label -100 at row 1 is outside [0, 13)"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Gelu, MlmHeadTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Erf" : "Tanh"; });

// ---- the pooler and binary head ------------------------------------------------------------------

TEST(PoolerBinaryHead, LogitsMatchANaiveDoubleReferenceAndGradientsFiniteDifferences) {
  const TransformerConfig cfg = test::small_bert_config();
  const ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  PoolerBinaryHead head(store, ctx, cfg);
  store.finalize();
  randomize(store, 30);
  const int64_t B = 3, T = 2;
  const std::vector<float> x = test::random_vector(B * T * 8, 31, -1.5f, 1.5f);
  const std::vector<int32_t> labels{1, kMlmIgnore, 0};
  Arena arena;
  Tensor xt = Tensor::empty({B * T, 8}, DType::F32);
  std::copy(x.begin(), x.end(), xt.data<float>());
  const Tensor lg = head.logits(arena, xt, B, T);
  const float *wp = param(store, "pooler.dense.weight"), *bp = param(store, "pooler.dense.bias"),
              *wb = param(store, "binary_head.weight"), *bb = param(store, "binary_head.bias");
  double want_loss = 0;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> p(8);
    for (int o = 0; o < 8; ++o) {
      double h = bp[o];
      for (int c = 0; c < 8; ++c) h += static_cast<double>(wp[o * 8 + c]) * x[(b * T) * 8 + c];
      p[o] = std::tanh(h);
    }
    double z[2];
    for (int k = 0; k < 2; ++k) {
      z[k] = bb[k];
      for (int c = 0; c < 8; ++c) z[k] += p[c] * wb[k * 8 + c];
      EXPECT_NEAR(lg.data<float>()[b * 2 + k], z[k], 1e-5);
    }
    if (labels[b] != kMlmIgnore)
      want_loss += std::log(std::exp(z[0]) + std::exp(z[1])) - z[labels[b]];
  }
  arena.reset();
  EXPECT_NEAR(head.loss(arena, xt, B, T, labels.data(), 1.0f, nullptr), want_loss, 1e-5);
  // The gradient reaches the first row of each sequence only (added to dx, which starts at zero here).
  check_gradients("pooler and binary head", store, arena, x, {B * T, 8}, [&](Arena& a, const Tensor& in, Tensor* dx) {
    if (dx) dx->zero_();
    return head.loss(a, in, B, T, labels.data(), 1.0f, dx);
  });
}

}  // namespace
}  // namespace megadlm
