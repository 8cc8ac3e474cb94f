// Learning-rate schedules (Megatron's OptimizerParamScheduler semantics) against hand-computed
// values, and the AdamW class (clipping, parameter groups, bias correction) against a double-precision
// reference on a tiny ParamStore.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parameters.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "test_util.h"

using namespace megadlm;

namespace {

using test::error_of;
LrSchedule schedule(LrDecayStyle style) {
  LrSchedule s;
  s.lr = 1e-3;
  s.min_lr = 1e-4;
  s.warmup_iters = 10;
  s.decay_iters = 110;
  s.style = style;
  return s;
}

}  // namespace

// ---- LrSchedule --------------------------------------------------------------------------------------

TEST(LrSchedule, LinearWarmupFromZero) {
  for (LrDecayStyle style : {LrDecayStyle::Constant, LrDecayStyle::Linear, LrDecayStyle::Cosine, LrDecayStyle::WSD}) {
    LrSchedule s = schedule(style);
    s.wsd_decay_iters = 20;
    EXPECT_DOUBLE_EQ(s.at(0), 0.0);
    EXPECT_DOUBLE_EQ(s.at(1), 1e-4);
    EXPECT_DOUBLE_EQ(s.at(5), 5e-4);
    EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  }
}

TEST(LrSchedule, LinearDecay) {
  const LrSchedule s = schedule(LrDecayStyle::Linear);
  // ratio = (step - 10) / 100; lr = min + (1 - ratio) (lr - min)
  EXPECT_NEAR(s.at(11), 1e-4 + 0.99 * 9e-4, 1e-15);
  EXPECT_NEAR(s.at(35), 1e-4 + 0.75 * 9e-4, 1e-15);
  EXPECT_NEAR(s.at(60), 5.5e-4, 1e-15);
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(111), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(100000), 1e-4);
  for (int64_t i = 11; i <= 120; ++i) EXPECT_LE(s.at(i), s.at(i - 1)) << "step " << i;
}

TEST(LrSchedule, CosineDecay) {
  const LrSchedule s = schedule(LrDecayStyle::Cosine);
  // coeff = (1 + cos(pi ratio)) / 2
  EXPECT_NEAR(s.at(35), 1e-4 + 9e-4 * 0.8535533905932737, 1e-15);  // ratio 1/4: (1 + sqrt(1/2)) / 2
  EXPECT_NEAR(s.at(60), 5.5e-4, 1e-15);                             // ratio 1/2
  EXPECT_NEAR(s.at(85), 1e-4 + 9e-4 * 0.1464466094067262, 1e-15);  // ratio 3/4
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(111), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(5000), 1e-4);
}

TEST(LrSchedule, Constant) {
  const LrSchedule s = schedule(LrDecayStyle::Constant);
  EXPECT_DOUBLE_EQ(s.at(11), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(110), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(1000000), 1e-3);
  LrSchedule no_warmup = s;
  no_warmup.warmup_iters = 0;
  EXPECT_DOUBLE_EQ(no_warmup.at(0), 1e-3);
  EXPECT_DOUBLE_EQ(no_warmup.at(1), 1e-3);
}

TEST(LrSchedule, WSDHoldsThenAnnealsForEachStyle) {
  // lr 1e-3, min 1e-5, warm-up 10, decay over 100 iterations, the last 20 of them annealing.
  struct Case {
    WsdDecayStyle style;
    double at85, at90;  // coefficients at r = 1/4 and r = 1/2
  };
  const Case cases[] = {
      {WsdDecayStyle::Linear, 0.75, 0.5},
      {WsdDecayStyle::Cosine, 0.8535533905932737, 0.5},
      {WsdDecayStyle::Exponential, 2.0 * std::pow(0.5, 0.25) - 1.0, 0.41421356237309515},  // 2/2^r - 1
  };
  for (const Case& c : cases) {
    LrSchedule s;
    s.lr = 1e-3;
    s.min_lr = 1e-5;
    s.warmup_iters = 10;
    s.decay_iters = 100;
    s.style = LrDecayStyle::WSD;
    s.wsd_decay_iters = 20;
    s.wsd_style = c.style;
    for (int64_t i = 10; i <= 80; ++i) EXPECT_DOUBLE_EQ(s.at(i), 1e-3) << "hold at step " << i;
    EXPECT_NEAR(s.at(85), 1e-5 + c.at85 * 9.9e-4, 1e-15);
    EXPECT_NEAR(s.at(90), 1e-5 + c.at90 * 9.9e-4, 1e-15);
    EXPECT_NEAR(s.at(100), 1e-5, 1e-15);
    EXPECT_DOUBLE_EQ(s.at(101), 1e-5);
    EXPECT_DOUBLE_EQ(s.at(10000), 1e-5);
    for (int64_t i = 81; i <= 100; ++i) {
      EXPECT_LT(s.at(i), s.at(i - 1)) << "anneal at step " << i;
      EXPECT_GE(s.at(i), 1e-5 - 1e-18);
    }
  }
  // Exponential at r = 1/4, by hand: 2 * 0.8408964152537145 - 1.
  EXPECT_NEAR(2.0 * std::pow(0.5, 0.25) - 1.0, 0.681792830507429, 1e-15);
}

TEST(LrSchedule, InverseSquareRoot) {
  // lr * sqrt(warmup) / sqrt(step), floored at min_lr, and min_lr past decay_iters (Megatron).
  LrSchedule s = schedule(LrDecayStyle::InverseSquareRoot);
  s.warmup_iters = 4;
  s.min_lr = 1e-5;
  s.decay_iters = 100;
  EXPECT_DOUBLE_EQ(s.at(2), 5e-4);   // warm-up
  EXPECT_DOUBLE_EQ(s.at(4), 1e-3);
  EXPECT_NEAR(s.at(16), 5e-4, 1e-15);
  EXPECT_NEAR(s.at(100), 2e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(101), 1e-5);
  s.min_lr = 3e-4;
  EXPECT_DOUBLE_EQ(s.at(100), 3e-4);
}

TEST(LrSchedule, NamesAndErrorsNamingTheFlag) {
  EXPECT_EQ(lr_decay_style_from_name("constant"), LrDecayStyle::Constant);
  EXPECT_EQ(lr_decay_style_from_name("linear"), LrDecayStyle::Linear);
  EXPECT_EQ(lr_decay_style_from_name("cosine"), LrDecayStyle::Cosine);
  EXPECT_EQ(lr_decay_style_from_name("inverse-square-root"), LrDecayStyle::InverseSquareRoot);
  EXPECT_EQ(lr_decay_style_from_name("WSD"), LrDecayStyle::WSD);
  EXPECT_EQ(wsd_decay_style_from_name("exponential"), WsdDecayStyle::Exponential);
  EXPECT_EQ(wsd_decay_style_from_name("linear"), WsdDecayStyle::Linear);
  EXPECT_EQ(wsd_decay_style_from_name("cosine"), WsdDecayStyle::Cosine);
  std::string msg = error_of([] { lr_decay_style_from_name("cosinus"); });
  EXPECT_NE(msg.find("--lr-decay-style"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cosinus"), std::string::npos) << msg;
  msg = error_of([] { wsd_decay_style_from_name("step"); });
  EXPECT_NE(msg.find("--lr-wsd-decay-style"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step"), std::string::npos) << msg;
}

// ---- AdamW -------------------------------------------------------------------------------------------

namespace {

struct Reference {  // double-precision AdamW state for one element
  double p, m = 0, v = 0;
};

// torch.optim.AdamW: decoupled decay, bias-corrected moments.
void reference_step(std::vector<Reference>& st, const std::vector<double>& g, const std::vector<bool>& decay,
                    double lr, double b1, double b2, double eps, double wd, int64_t step) {
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step)), bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  for (size_t i = 0; i < st.size(); ++i) {
    Reference& r = st[i];
    r.m = b1 * r.m + (1 - b1) * g[i];
    r.v = b2 * r.v + (1 - b2) * g[i] * g[i];
    r.p = r.p * (1.0 - lr * (decay[i] ? wd : 0.0)) - lr * (r.m / bc1) / (std::sqrt(r.v / bc2) + eps);
  }
}

// Two parameters: a [3, 5] matrix with weight decay and a [7] bias without. 15 is not a multiple of 16,
// so the bias starts after padding in the flat buffer.
struct TinyStore {
  ParamStore ps;
  int w, b;
  TinyStore() {
    w = ps.add("w", {3, 5}, Init::Normal, 0.5f, true);
    b = ps.add("b", {7}, Init::Zeros, 0.0f, false);
    ps.finalize();
    const std::vector<float> wv = test::random_vector(15, 11), bv = test::random_vector(7, 12);
    std::copy(wv.begin(), wv.end(), ps.value(w).data<float>());
    std::copy(bv.begin(), bv.end(), ps.value(b).data<float>());
  }
  // Elements in (w, b) order, with whether they decay.
  std::vector<float*> elems(bool grads) {
    std::vector<float*> out;
    for (int id : {w, b}) {
      Tensor t = grads ? ps.grad(id) : ps.value(id);
      for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<float>() + i);
    }
    return out;
  }
  std::vector<bool> decays() const {
    std::vector<bool> d(15, true);
    d.resize(22, false);
    return d;
  }
  void set_grads(const std::vector<float>& g) {
    std::vector<float*> e = elems(true);
    for (size_t i = 0; i < e.size(); ++i) *e[i] = g[i];
  }
};

}  // namespace

TEST(AdamW, TwoStepsMatchDoubleReferenceWithAndWithoutDecay) {
  TinyStore s;
  AdamWConfig cfg;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.95f;
  cfg.eps = 1e-8f;
  cfg.weight_decay = 0.1f;
  cfg.clip_grad = 0.0f;  // off
  AdamW opt(s.ps, cfg);
  EXPECT_EQ(opt.steps_taken(), 0);
  std::vector<Reference> ref;
  for (float* p : s.elems(false)) ref.push_back({static_cast<double>(*p)});
  const double lr = 0.01;
  for (int64_t step = 1; step <= 2; ++step) {
    const std::vector<float> g = test::random_vector(22, 100 + step, -3.0f, 3.0f);
    s.set_grads(g);
    double sq = 0;
    for (float x : g) sq += static_cast<double>(x) * x;
    const double norm = opt.step(lr);
    EXPECT_NEAR(norm, std::sqrt(sq), 1e-9 * std::sqrt(sq));
    EXPECT_EQ(opt.steps_taken(), step);
    reference_step(ref, test::to_double(g), s.decays(), lr, 0.9, 0.95, 1e-8, 0.1, step);
    const std::vector<float*> p = s.elems(false);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(*p[i], ref[i].p, 5e-7) << "step " << step << " element " << i;
  }
  // The moments are stored at the parameters' offsets in the flat buffers.
  const float* m = opt.exp_avg().data<float>();
  const float* v = opt.exp_avg_sq().data<float>();
  const int64_t boff = s.ps.info(s.b).offset;
  ASSERT_EQ(boff, 16);
  EXPECT_NEAR(m[0], ref[0].m, 1e-6);
  EXPECT_NEAR(v[14], ref[14].v, 1e-5);
  EXPECT_NEAR(m[boff + 6], ref[21].m, 1e-6);
  EXPECT_NEAR(v[boff], ref[15].v, 1e-5);
  EXPECT_EQ(m[15], 0.0f);  // padding untouched
}

// apply_and_zero_grads: apply's update, with every gradient zero afterwards, so that the next step's
// zero_grads() may skip its pass; the skip is used once, a later zero_grads() clears again.
TEST(AdamW, ApplyAndZeroGradsLeavesTheGradientsZero) {
  TinyStore s1, s2;
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  cfg.clip_grad = 1.0f;
  AdamW o1(s1.ps, cfg), o2(s2.ps, cfg);
  const auto all_grads = [](ParamStore& ps) { return std::vector<float>(ps.grads(), ps.grads() + ps.numel()); };
  const std::vector<float> zeros(s2.ps.numel(), 0.0f);
  for (int64_t step = 1; step <= 2; ++step) {
    const std::vector<float> g = test::random_vector(22, 200 + step, -2.0f, 2.0f);
    s1.ps.zero_grads();
    s2.ps.zero_grads();
    s1.set_grads(g);
    s2.set_grads(g);
    const double n1 = o1.grad_norm(), n2 = o2.grad_norm();
    ASSERT_EQ(n1, n2);
    ASSERT_GT(n1, 1.0);  // clipped: the scale is applied on the same pass as the clearing
    o1.apply(0.01, n1, {});
    o2.apply_and_zero_grads(0.01, n2, {});
    EXPECT_NE(all_grads(s1.ps), zeros) << "apply leaves the gradients as they are";
    EXPECT_EQ(all_grads(s2.ps), zeros) << "step " << step;
    EXPECT_EQ(std::vector<float>(s1.ps.values(), s1.ps.values() + 22),
              std::vector<float>(s2.ps.values(), s2.ps.values() + 22));
  }
  s2.ps.zero_grads();  // skips its pass, once
  EXPECT_EQ(all_grads(s2.ps), zeros);
  s2.set_grads(test::random_vector(22, 300, 0.5f, 1.0f));
  s2.ps.zero_grads();  // nothing noted since: clears
  EXPECT_EQ(all_grads(s2.ps), zeros);
}

// A frozen parameter (AdamW::freeze) keeps its value, and apply_and_zero_grads clears its gradient with
// the others' (the store is told every gradient is zero: one left would add into the next step's).
TEST(AdamW, ApplyAndZeroGradsClearsTheFrozenParametersGradientsToo) {
  TinyStore s;
  AdamW opt(s.ps, AdamWConfig{});
  opt.freeze(s.w, s.w + 1);
  const auto values = [&](int id) {
    const Tensor t = s.ps.value(id);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  const std::vector<float> w0 = values(s.w), b0 = values(s.b);
  s.ps.zero_grads();
  s.set_grads(test::random_vector(22, 400, 0.5f, 1.0f));
  opt.apply_and_zero_grads(0.01, opt.grad_norm(), {});
  EXPECT_EQ(values(s.w), w0);
  EXPECT_NE(values(s.b), b0);
  EXPECT_EQ(std::vector<float>(s.ps.grads(), s.ps.grads() + s.ps.numel()), std::vector<float>(s.ps.numel(), 0.0f));
}

TEST(AdamW, WeightDecaySkipsParametersThatOptOut) {
  // Zero gradients: the only change is the decay, p *= 1 - lr * wd, and only on the matrix.
  TinyStore s;
  AdamWConfig cfg;
  cfg.weight_decay = 0.5f;
  cfg.clip_grad = 1.0f;
  AdamW opt(s.ps, cfg);
  std::vector<float> before;
  for (float* p : s.elems(false)) before.push_back(*p);
  EXPECT_EQ(opt.step(0.1), 0.0);
  const std::vector<float*> p = s.elems(false);
  for (size_t i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(*p[i], before[i] * 0.95f);
  for (size_t i = 15; i < 22; ++i) EXPECT_EQ(*p[i], before[i]);
}

TEST(AdamW, ClipsByGlobalNormAndReturnsTheNormBeforeClipping) {
  TinyStore s;
  AdamWConfig cfg;
  cfg.beta1 = 0.8f;
  cfg.beta2 = 0.9f;
  cfg.eps = 1e-6f;
  cfg.weight_decay = 0.0f;
  cfg.clip_grad = 0.5f;
  AdamW opt(s.ps, cfg);
  std::vector<Reference> ref;
  for (float* p : s.elems(false)) ref.push_back({static_cast<double>(*p)});
  const double lr = 0.05;
  // Step 1: norm ~ 2.5 > 0.5, clipped. Step 2: small gradients, norm < 0.5, not clipped. Adam is
  // scale invariant on its first step only, so step 2's update shows whether step 1 was clipped.
  const std::vector<float> g1 = test::random_vector(22, 7, -1.0f, 1.0f);
  std::vector<float> g2 = test::random_vector(22, 8, -0.05f, 0.05f);
  for (int64_t step = 1; step <= 2; ++step) {
    const std::vector<float>& g = step == 1 ? g1 : g2;
    s.set_grads(g);
    double sq = 0;
    for (float x : g) sq += static_cast<double>(x) * x;
    const double norm = std::sqrt(sq);
    if (step == 1) {
      ASSERT_GT(norm, 1.0);
    } else {
      ASSERT_LT(norm, 0.5);
    }
    EXPECT_NEAR(opt.step(lr), norm, 1e-9 * norm);
    std::vector<double> used = test::to_double(g);
    if (norm > 0.5)
      for (double& x : used) x *= 0.5 / (norm + 1e-6);
    reference_step(ref, used, s.decays(), lr, 0.8, 0.9, 1e-6, 0.0, step);
    if (step == 1) {
      // The first moment is (1 - beta1) times the clipped gradient.
      const float* m = opt.exp_avg().data<float>();
      EXPECT_NEAR(m[3], 0.2 * used[3], 1e-7);
      EXPECT_NEAR(m[16 + 2], 0.2 * used[17], 1e-7);
    }
    const std::vector<float*> p = s.elems(false);
    for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(*p[i], ref[i].p, 1e-6) << "step " << step << " element " << i;
  }
  EXPECT_EQ(opt.steps_taken(), 2);
}
