// The vision tower's and LLaVA's projector's modules: the quick GELU (in the MLP), the patch embedding
// and the projector (mlp2x_gelu, linear). Each forward against a naive double reference, each gradient
// by finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "grad_check.h"
#include "nn/bert_reference.h"
#include "nn/host_activation.h"
#include "nn/mlp.h"
#include "nn/patch_embedding.h"
#include "nn/vision_projector.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;

double quick_gelu(double x) { return x / (1.0 + std::exp(-1.702 * x)); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

using test::param;

Tensor host_tensor(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// ---- the quick GELU --------------------------------------------------------------------------------

TEST(QuickGelu, MatchesItsFormulaAndItsDerivative) {
  const std::vector<float> x = test::random_vector(64, 3, -5.0f, 5.0f);
  const Tensor in = host_tensor(x, {64});
  Tensor out = Tensor::empty({64}, DType::F32), d = Tensor::empty({64}, DType::F32);
  Tensor ones = Tensor::empty({64}, DType::F32);
  ones.fill_(1.0f);
  host_activation_forward(HostActivation::QuickGelu, out, in);
  host_activation_backward(HostActivation::QuickGelu, d, in, ones);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(out.data<float>()[i], quick_gelu(x[i]), 1e-6);
    const double h = 1e-4, numeric = (quick_gelu(x[i] + h) - quick_gelu(x[i] - h)) / (2 * h);
    EXPECT_NEAR(d.data<float>()[i], numeric, 1e-5);
  }
  EXPECT_ANY_THROW(host_activation_forward(HostActivation::None, out, in));
}

TEST(QuickGelu, TheMlpTakesItAndItsGradientsMatchFiniteDifferences) {
  TransformerConfig cfg;
  cfg.hidden_size = 8;
  const ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  MLP mlp(store, ctx, "mlp", cfg, Activation::Gelu, 12, 0.02f, HostActivation::QuickGelu);
  store.finalize();
  randomize(store, 4);
  const std::vector<float> x0 = test::random_vector(4 * 8, 5, -2.0f, 2.0f);
  Arena arena;
  const Tensor y = mlp.forward(arena, host_tensor(x0, {4, 8}));
  const std::vector<double> ref = test::mlp_reference(store, "mlp", x0, 8, 12, quick_gelu);
  for (int i = 0; i < 4 * 8; ++i) EXPECT_NEAR(y.data<float>()[i], ref[i], 1e-5);
  check_gradients("MLP with the quick GELU", store, arena, x0, {4, 8},
                  sum_times_random(32, 6, [&](Arena& a, const Tensor& in) { return mlp.forward(a, in); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { mlp.backward(a, dy, dx); }));
}

// ---- the patch embedding ---------------------------------------------------------------------------

// B = 2 images of 3 x 6 x 6, patches of 3 (a 2 x 2 grid, P = 4, S = 5), C = 5.
constexpr int64_t kB = 2, kImage = 6, kPatch = 3, kC = 5, kS = 5;

TEST(PatchEmbedding, IsTheConvolutionWithTheClassTokenAndPositions) {
  ParamStore store;
  PatchEmbedding emb(store, "embeddings", kImage, kPatch, kC, 0.02f);
  store.finalize();
  randomize(store, 21);
  EXPECT_EQ(store.info(store.find("embeddings.patch_embedding.weight")).shape, Shape({kC, 3, kPatch, kPatch}));
  const std::vector<float> px = test::random_vector(kB * 3 * kImage * kImage, 22);
  Arena arena;
  const Tensor x = emb.forward(arena, host_tensor(px, {kB, 3, kImage, kImage}));
  ASSERT_EQ(x.shape(), Shape({kB * kS, kC}));
  const float *cls = param(store, "embeddings.class_embedding"), *w = param(store, "embeddings.patch_embedding.weight"),
              *pos = param(store, "embeddings.position_embedding.weight");
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t s = 0; s < kS; ++s)
      for (int64_t o = 0; o < kC; ++o) {
        double ref = pos[s * kC + o];
        if (s == 0) {
          ref += cls[o];
        } else {  // the convolution of stride p at patch (gy, gx), weight [C, 3, p, p]
          const int64_t gy = (s - 1) / 2, gx = (s - 1) % 2;
          for (int64_t c = 0; c < 3; ++c)
            for (int64_t ky = 0; ky < kPatch; ++ky)
              for (int64_t kx = 0; kx < kPatch; ++kx)
                ref += static_cast<double>(w[((o * 3 + c) * kPatch + ky) * kPatch + kx]) *
                       px[((b * 3 + c) * kImage + gy * kPatch + ky) * kImage + gx * kPatch + kx];
        }
        EXPECT_NEAR(x.data<float>()[(b * kS + s) * kC + o], ref, 1e-5) << b << " " << s << " " << o;
      }
  EXPECT_ANY_THROW(emb.forward(arena, Tensor::empty({1, 3, kImage, kImage + 1}, DType::F32)));
  EXPECT_ANY_THROW(PatchEmbedding(store, "bad", 7, 3, kC, 0.02f));
}

TEST(PatchEmbedding, GradientsMatchFiniteDifferences) {
  ParamStore store;
  PatchEmbedding emb(store, "embeddings", kImage, kPatch, kC, 0.02f);
  store.finalize();
  randomize(store, 23);
  const Tensor px = host_tensor(test::random_vector(kB * 3 * kImage * kImage, 24), {kB, 3, kImage, kImage});
  Arena arena;
  check_gradients("patch embedding", store, arena, {}, {},
                  sum_times_random(kB * kS * kC, 25, [&](Arena& a, const Tensor&) { return emb.forward(a, px); },
                                   [&](Arena&, const Tensor& dy, Tensor&) { emb.backward(dy); }));
}

// ---- the projector ---------------------------------------------------------------------------------

class Projector : public ::testing::TestWithParam<ProjectorType> {};

TEST_P(Projector, MatchesItsFormulaAndItsGradientsMatchFiniteDifferences) {
  const ProjectorType type = GetParam();
  const bool mlp = type == ProjectorType::Mlp2xGelu;
  const ParallelContext ctx = ParallelContext::single();
  ParamStore store;
  VisionProjector proj(store, ctx, "multi_modal_projector", type, 6, 7, 0.02f);
  store.finalize();
  randomize(store, 31);
  EXPECT_EQ(store.count(), mlp ? 4 : 2);
  const std::vector<float> x0 = test::random_vector(3 * 6, 32, -2.0f, 2.0f);
  Arena arena;
  const Tensor y = proj.forward(arena, host_tensor(x0, {3, 6}));
  ASSERT_EQ(y.shape(), Shape({3, 7}));
  const float *w1 = param(store, "multi_modal_projector.linear_1.weight"),
              *b1 = param(store, "multi_modal_projector.linear_1.bias");
  for (int n = 0; n < 3; ++n) {
    std::vector<double> h(7);
    for (int o = 0; o < 7; ++o) {
      h[o] = b1[o];
      for (int i = 0; i < 6; ++i) h[o] += static_cast<double>(w1[o * 6 + i]) * x0[n * 6 + i];
    }
    for (int o = 0; o < 7; ++o) {
      double ref = h[o];
      if (mlp) {
        const float *w2 = param(store, "multi_modal_projector.linear_2.weight"),
                    *b2 = param(store, "multi_modal_projector.linear_2.bias");
        ref = b2[o];
        for (int i = 0; i < 7; ++i) ref += static_cast<double>(w2[o * 7 + i]) * gelu_erf(h[i]);
      }
      EXPECT_NEAR(y.data<float>()[n * 7 + o], ref, 1e-5);
    }
  }
  check_gradients(mlp ? "mlp2x_gelu projector" : "linear projector", store, arena, x0, {3, 6},
                  sum_times_random(21, 33, [&](Arena& a, const Tensor& in) { return proj.forward(a, in); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { proj.backward(a, dy, dx); }));
}

INSTANTIATE_TEST_SUITE_P(Types, Projector, ::testing::Values(ProjectorType::Mlp2xGelu, ProjectorType::Linear));

}  // namespace
}  // namespace megadlm
