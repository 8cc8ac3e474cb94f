// AdamW against a double-precision reference over several steps, and the reductions used for clipping
// and overflow checks: sum_squares must give the same bits for any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/optim.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

// The textbook form (which the kernel does not use: it folds the corrections as torch does):
// p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p).
void adamw_reference(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                     std::vector<double>& v, const AdamWParams& h) {
  const double b1 = h.beta1, b2 = h.beta2;
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    const double mhat = m[i] / (1 - std::pow(b1, static_cast<double>(h.step)));
    const double vhat = v[i] / (1 - std::pow(b2, static_cast<double>(h.step)));
    p[i] -= static_cast<double>(h.lr) * (mhat / (std::sqrt(vhat) + h.eps) + h.weight_decay * p[i]);
  }
}

}  // namespace

TEST(AdamW, MatchesDoubleReferenceOverSteps) {
  const int64_t n = 50021;  // threaded, awkward length
  for (float wd : {0.0f, 0.1f}) {
    auto p = random_vector(n, 1);
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    auto pr = megadlm::test::to_double(p);
    std::vector<double> mr(n, 0.0), vr(n, 0.0);
    AdamWParams h;
    h.lr = 1e-2f;
    h.beta1 = 0.9f;
    h.beta2 = 0.95f;
    h.eps = 1e-8f;
    h.weight_decay = wd;
    for (int64_t step = 1; step <= 6; ++step) {
      h.step = step;
      // Gradients across magnitudes, including exact zeros (where eps matters).
      auto g = random_vector(n, 100 + step, -1.0f, 1.0f);
      for (int64_t i = 0; i < n; i += 97) g[i] *= 1e-4f;
      for (int64_t i = 0; i < n; i += 1009) g[i] = 0.0f;
      cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), n, h);
      adamw_reference(pr, megadlm::test::to_double(g), mr, vr, h);
    }
    double worst_p = 0, worst_m = 0, worst_v = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Each step moves p by about lr; fp32 keeps ~1e-7 relative of the update and of p itself.
      worst_p = std::max(worst_p, std::fabs(p[i] - pr[i]) / (1e-7 * std::fabs(pr[i]) + 6 * h.lr * 1e-6));
      // m sums terms of both signs (|g| <= 1), so its rounding error scales with the terms, not with m.
      worst_m = std::max(worst_m, std::fabs(m[i] - mr[i]) / (1e-6 * std::fabs(mr[i]) + 1e-7));
      worst_v = std::max(worst_v, std::fabs(v[i] - vr[i]) / (1e-6 * std::fabs(vr[i]) + 1e-15));
    }
    EXPECT_LT(worst_p, 4.0) << "wd " << wd;
    EXPECT_LT(worst_m, 4.0) << "wd " << wd;
    EXPECT_LT(worst_v, 4.0) << "wd " << wd;
  }
}

// grad_scale (clipping folded into the update) gives bit for bit the update on pre-scaled gradients.
TEST(AdamW, GradScaleEqualsScaledGradients) {
  const int64_t n = 40961;
  auto g = random_vector(n, 7, -3.0f, 3.0f);
  const float s = 0.3719f;
  std::vector<float> gs(g);
  for (float& x : gs) x *= s;
  auto p1 = random_vector(n, 8), p2 = p1;
  std::vector<float> m1(n, 0.0f), v1(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f);
  AdamWParams h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 3; ++step) {
    h.step = step;
    h.grad_scale = 1.0f;
    cpu::adamw_step(p1.data(), gs.data(), m1.data(), v1.data(), n, h);
    h.grad_scale = s;
    cpu::adamw_step(p2.data(), g.data(), m2.data(), v2.data(), n, h);
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  EXPECT_NE(p1, random_vector(n, 8));
}

// lr 1e-2 with weight decay 0.1 and the given gradient scale (the tests of the update's variants).
static AdamWParams decayed_params(float grad_scale) {
  AdamWParams h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  h.grad_scale = grad_scale;
  return h;
}

// With a bf16 target the update is the same bits and the target holds the updated values in bf16, at
// any alignment of the target (the aligned middle takes streaming stores, the ends plain ones), and
// nothing around it is written.
TEST(AdamW, Bf16CopyWrittenOnThePass) {
  const int64_t n = 40961;  // threaded, with a tail
  auto g = random_vector(n, 17, -3.0f, 3.0f);
  for (const int64_t offset : {0, 1, 7, 16}) {
    SCOPED_TRACE(testing::Message() << "copy offset " << offset);
    auto p1 = random_vector(n, 18), p2 = p1;
    std::vector<float> m1(n, 0.0f), v1(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f);
    std::vector<uint16_t> copy(n + 32, 0x7FC0);
    AdamWParams h = decayed_params(0.5f);
    for (int64_t step = 1; step <= 2; ++step) {
      h.step = step;
      cpu::adamw_step(p1.data(), g.data(), m1.data(), v1.data(), n, h);
      cpu::adamw_step(p2.data(), g.data(), m2.data(), v2.data(), n, h, copy.data() + offset);
    }
    EXPECT_EQ(p1, p2);
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(v1, v2);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copy[offset + i], f32_to_bf16(p2[i])) << i;
    for (int64_t i = 0; i < offset; ++i) ASSERT_EQ(copy[i], 0x7FC0) << "before the copy, at " << i;
    for (int64_t i = offset + n; i < n + 32; ++i) ASSERT_EQ(copy[i], 0x7FC0) << "after the copy, at " << i;
  }
}

// zero_grad: the same update bits (with and without the bf16 copy), and the gradient left zero.
TEST(AdamW, ZeroGradOnThePass) {
  const int64_t n = 40961;  // threaded, with a tail
  const auto g = random_vector(n, 27, -3.0f, 3.0f);
  for (bool with_copy : {false, true}) {
    auto p1 = random_vector(n, 28), p2 = p1;
    std::vector<float> m1(n, 0.0f), v1(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f);
    std::vector<uint16_t> copy1(n, 0), copy2(n, 0);
    AdamWParams h = decayed_params(0.7f);
    for (int64_t step = 1; step <= 2; ++step) {
      h.step = step;
      std::vector<float> g1 = g, g2 = g;
      h.zero_grad = false;
      cpu::adamw_step(p1.data(), g1.data(), m1.data(), v1.data(), n, h, with_copy ? copy1.data() : nullptr);
      h.zero_grad = true;
      cpu::adamw_step(p2.data(), g2.data(), m2.data(), v2.data(), n, h, with_copy ? copy2.data() : nullptr);
      EXPECT_EQ(g1, g) << "without zero_grad the gradient is left as it is";
      EXPECT_EQ(g2, std::vector<float>(n, 0.0f)) << "with_copy " << with_copy;
    }
    EXPECT_EQ(p1, p2) << "with_copy " << with_copy;
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(v1, v2);
    EXPECT_EQ(copy1, copy2);
    EXPECT_NE(p1, random_vector(n, 28));
  }
}

// At step 1 the bias-corrected update is lr * g / (|g| + eps): a step of lr against the gradient's sign,
// and weight decay shrinks p by the factor (1 - lr * wd) on top.
TEST(AdamW, FirstStepIsSignedLearningRate) {
  std::vector<float> p = {1.0f, 1.0f, -2.0f, 0.5f}, g = {3.0f, -0.001f, 1e-3f, 0.0f};
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  AdamWParams h;
  h.lr = 0.1f;
  h.weight_decay = 0.5f;
  h.step = 1;
  cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), 4, h);
  const auto step = [&](double gi) { return 0.1 * std::fabs(gi) / (std::fabs(gi) + h.eps); };  // eps shows at small g
  EXPECT_NEAR(p[0], 1.0 * 0.95 - step(3.0), 1e-6);
  EXPECT_NEAR(p[1], 1.0 * 0.95 + step(0.001), 1e-6);
  EXPECT_NEAR(p[2], -2.0 * 0.95 - step(0.001), 1e-6);
  EXPECT_NEAR(p[3], 0.5 * 0.95, 1e-7);  // g = 0: only decay
  // m and v hold the uncorrected averages; (1 - beta) is exact for the fp32 betas given.
  EXPECT_NEAR(m[0], (1.0 - static_cast<double>(h.beta1)) * 3.0, 1e-7);
  EXPECT_NEAR(v[0], (1.0 - static_cast<double>(h.beta2)) * 9.0, 1e-9);
}

TEST(AdamW, RejectsBadHyperparameters) {
  float p = 0, g = 0, m = 0, v = 0;
  AdamWParams h;
  h.step = 0;
  EXPECT_THROW(cpu::adamw_step(&p, &g, &m, &v, 1, h), Error);
  h.step = 1;
  h.beta2 = 1.0f;
  EXPECT_THROW(cpu::adamw_step(&p, &g, &m, &v, 1, h), Error);
}

TEST(Reductions, SumSquaresSameBitsAnyThreadCountAndExact) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{4097}, int64_t{3 * 4096 + 123}, int64_t{1000003}}) {
    auto x = random_vector(n, 7 + n, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; i += 101) x[i] *= 1e4f;  // spread magnitudes so order would show
    double ref = 0;
    for (float xi : x) ref += static_cast<double>(xi) * xi;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = cpu::sum_squares(x.data(), n);
    omp_set_num_threads(2);
    const double two = cpu::sum_squares(x.data(), n);
    omp_set_num_threads(3);
    const double three = cpu::sum_squares(x.data(), n);
    omp_set_num_threads(saved);
    EXPECT_EQ(std::memcmp(&one, &two, sizeof(double)), 0) << "n " << n << ": " << one << " vs " << two;
    EXPECT_EQ(std::memcmp(&one, &three, sizeof(double)), 0) << "n " << n;
    EXPECT_NEAR(one, ref, 1e-12 * ref) << "n " << n;
  }
}

TEST(Reductions, AbsMaxAndAllFinite) {
  const int64_t n = 70001;
  auto x = random_vector(n, 9, -1.0f, 1.0f);
  x[31337] = -7.5f;  // the largest magnitude is negative
  EXPECT_EQ(cpu::abs_max(x.data(), n), 7.5f);
  EXPECT_TRUE(cpu::all_finite(x.data(), n));
  EXPECT_EQ(cpu::abs_max(x.data(), 0), 0.0f);
  EXPECT_TRUE(cpu::all_finite(x.data(), 0));

  for (int64_t at : {int64_t{0}, int64_t{12345}, n - 1}) {
    auto y = x;
    y[at] = NAN;
    EXPECT_TRUE(std::isnan(cpu::abs_max(y.data(), n))) << "NaN at " << at;
    EXPECT_FALSE(cpu::all_finite(y.data(), n)) << "NaN at " << at;
    y[at] = -INFINITY;
    EXPECT_EQ(cpu::abs_max(y.data(), n), INFINITY) << "-inf at " << at;
    EXPECT_FALSE(cpu::all_finite(y.data(), n)) << "-inf at " << at;
    y[at] = INFINITY;
    EXPECT_FALSE(cpu::all_finite(y.data(), n)) << "inf at " << at;
    y[at] = 3.4e38f;  // the largest floats are finite
    EXPECT_TRUE(cpu::all_finite(y.data(), n)) << "max float at " << at;
    EXPECT_EQ(cpu::abs_max(y.data(), n), 3.4e38f);
  }
  // Short arrays take the single-threaded path.
  const std::vector<float> s = {1.0f, -2.0f, NAN};
  EXPECT_TRUE(std::isnan(cpu::abs_max(s.data(), 3)));
  EXPECT_EQ(cpu::abs_max(s.data(), 2), 2.0f);
  EXPECT_FALSE(cpu::all_finite(s.data(), 3));
}
