// LayerNorm and RMSNorm against double-precision references. The references' analytic backward is
// checked by central differences (double, h = 1e-6) of sum(out * dout); the fp32 kernels' forward and
// backward are compared with the references on awkward shapes, with NaN-poisoned outputs, parameter
// gradients that must accumulate onto non-zero values, and bitwise thread-count independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/norm.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::max_rel_error;
using megadlm::test::numerical_gradient;
using megadlm::test::random_vector;
using megadlm::test::to_double;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kEps = 1e-5;
// (N, C): awkward sizes, then one large enough for the threaded path and several column blocks.
const int64_t kShapes[][2] = {{1, 1}, {7, 13}, {33, 100}, {1, 7}, {65, 300}};

struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int n) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

// Double reference for both norms: out, the saved statistics, and the analytic backward.
struct NormRef {
  std::vector<double> out, mean, rstd, dinp, dweight, dbias;
};

// LayerNorm (rms = false) or RMSNorm (rms = true) of x [N,C] in double; bias may be empty.
NormRef norm_forward_ref(bool rms, const std::vector<double>& x, const std::vector<double>& w,
                         const std::vector<double>& b, int64_t N, int64_t C) {
  NormRef r;
  r.out.resize(N * C);
  r.mean.resize(N);
  r.rstd.resize(N);
  for (int64_t n = 0; n < N; ++n) {
    const double* xr = &x[n * C];
    double m = 0.0;
    if (!rms) {
      for (int64_t c = 0; c < C; ++c) m += xr[c];
      m /= C;
    }
    double v = 0.0;
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double s = 1.0 / std::sqrt(v / C + kEps);
    for (int64_t c = 0; c < C; ++c) r.out[n * C + c] = (xr[c] - m) * s * w[c] + (b.empty() ? 0.0 : b[c]);
    r.mean[n] = m;
    r.rstd[n] = s;
  }
  return r;
}

// Analytic backward of the reference (the formulas under test): fills r.dinp, r.dweight, r.dbias.
void norm_backward_ref(bool rms, NormRef& r, const std::vector<double>& x, const std::vector<double>& w,
                       const std::vector<double>& dout, int64_t N, int64_t C) {
  r.dinp.assign(N * C, 0.0);
  r.dweight.assign(C, 0.0);
  r.dbias.assign(C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const double m = r.mean[n], s = r.rstd[n];
    double mg = 0.0, mgx = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - m) * s, g = w[c] * dout[n * C + c];
      mg += g / C;
      mgx += g * xhat / C;
      r.dweight[c] += dout[n * C + c] * xhat;
      r.dbias[c] += dout[n * C + c];
    }
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - m) * s, g = w[c] * dout[n * C + c];
      r.dinp[n * C + c] = s * (g - (rms ? 0.0 : mg) - xhat * mgx);
    }
  }
}

double dot(const std::vector<double>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The reference backward against central differences of sum(out * dout) w.r.t. inp, weight and bias.
void check_reference_gradients(bool rms, int64_t N, int64_t C) {
  SCOPED_TRACE(::testing::Message() << (rms ? "rmsnorm" : "layernorm") << " N = " << N << " C = " << C);
  std::vector<double> x = to_double(random_vector(N * C, 10 + N * C, -2.0f, 3.0f));
  std::vector<double> w = to_double(random_vector(C, 20 + C, 0.5f, 1.5f));
  std::vector<double> b = rms ? std::vector<double>() : to_double(random_vector(C, 30 + C));
  const std::vector<float> dout = random_vector(N * C, 40 + N * C);
  NormRef r = norm_forward_ref(rms, x, w, b, N, C);
  norm_backward_ref(rms, r, x, w, to_double(dout), N, C);
  const auto loss = [&] { return dot(norm_forward_ref(rms, x, w, b, N, C).out, dout); };
  const auto gx = numerical_gradient<double>(x, loss, 1e-6);
  const auto gw = numerical_gradient<double>(w, loss, 1e-6);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(gx[i], r.dinp[i], 1e-6) << "dinp " << i;
  for (int64_t c = 0; c < C; ++c) ASSERT_NEAR(gw[c], r.dweight[c], 1e-6) << "dweight " << c;
  if (!rms) {
    const auto gb = numerical_gradient<double>(b, loss, 1e-6);
    for (int64_t c = 0; c < C; ++c) ASSERT_NEAR(gb[c], r.dbias[c], 1e-6) << "dbias " << c;
  }
}

// The fp32 kernels against the reference, outputs poisoned, parameter gradients accumulated.
void check_kernel(bool rms, bool with_bias, int64_t N, int64_t C) {
  SCOPED_TRACE(::testing::Message() << (rms ? "rmsnorm" : "layernorm") << (with_bias ? " bias" : "")
                                    << " N = " << N << " C = " << C);
  // An offset mean: a one-pass E[x^2] - E[x]^2 would lose digits here.
  const std::vector<float> x = random_vector(N * C, 50 + N * C, 4.0f, 6.0f);
  const std::vector<float> w = random_vector(C, 60 + C, -1.5f, 1.5f);
  const std::vector<float> b = with_bias ? random_vector(C, 70 + C) : std::vector<float>();
  const std::vector<float> dout = random_vector(N * C, 80 + N * C);
  const std::vector<float> dw0 = random_vector(C, 90 + C), db0 = random_vector(C, 95 + C);

  NormRef r = norm_forward_ref(rms, to_double(x), to_double(w), to_double(b), N, C);
  norm_backward_ref(rms, r, to_double(x), to_double(w), to_double(dout), N, C);

  std::vector<float> out(N * C, kNaN), mean(N, kNaN), rstd(N, kNaN), dinp(N * C, kNaN);
  std::vector<float> dw = dw0, db = db0;
  if (rms) {
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, static_cast<float>(kEps));
    cpu::rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  } else {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), with_bias ? b.data() : nullptr,
                           N, C, static_cast<float>(kEps));
    cpu::layernorm_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    EXPECT_LT(max_rel_error(mean.data(), r.mean.data(), N), 1e-6);
  }
  EXPECT_LT(max_rel_error(rstd.data(), r.rstd.data(), N), 1e-5);
  EXPECT_LT(max_rel_error(out.data(), r.out.data(), N * C), 1e-5);
  // dinp is a difference of terms of size rstd |w dout|; measure its error on that scale, since the
  // result itself can cancel to almost nothing (RMSNorm with C = 1 has dinp ~ eps / x^2).
  double term = 0.0, err = 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      term = std::fmax(term, r.rstd[n] * std::fabs(static_cast<double>(w[c]) * dout[n * C + c]));
      const double e = std::fabs(dinp[n * C + c] - r.dinp[n * C + c]);
      if (!(e <= err)) err = e;
    }
  EXPECT_LT(err / term, 1e-5);
  std::vector<double> dw_ref(C), db_ref(C);
  for (int64_t c = 0; c < C; ++c) {
    dw_ref[c] = dw0[c] + r.dweight[c];
    db_ref[c] = db0[c] + r.dbias[c];
  }
  EXPECT_LT(max_rel_error(dw.data(), dw_ref.data(), C), 1e-5);
  if (!rms && with_bias) {
    EXPECT_LT(max_rel_error(db.data(), db_ref.data(), C), 1e-5);
  } else {
    EXPECT_EQ(db, db0);  // untouched when dbias is null
  }

  // dinp may alias dout: the same bits.
  std::vector<float> inplace = dout, dw2 = dw0, db2 = db0;
  if (rms)
    cpu::rmsnorm_backward(inplace.data(), dw2.data(), inplace.data(), x.data(), w.data(), rstd.data(), N, C);
  else
    cpu::layernorm_backward(inplace.data(), dw2.data(), with_bias ? db2.data() : nullptr, inplace.data(), x.data(),
                            w.data(), mean.data(), rstd.data(), N, C);
  EXPECT_EQ(0, std::memcmp(inplace.data(), dinp.data(), N * C * sizeof(float)));
  EXPECT_EQ(dw2, dw);
  EXPECT_EQ(db2, db);
}

// Parameter gradients (sums over rows) and dinp: the same bits for 1 and 2 threads.
void check_thread_independence(bool rms) {
  const int64_t N = 517, C = 300;
  const std::vector<float> x = random_vector(N * C, 111, -2.0f, 2.0f);
  const std::vector<float> w = random_vector(C, 112), b = random_vector(C, 113);
  const std::vector<float> dout = random_vector(N * C, 114, -3.0f, 3.0f);
  std::vector<float> out(N * C), mean(N), rstd(N);
  if (rms)
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  else
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  std::vector<float> dinp[2], dw[2], db[2];
  for (int t = 0; t < 2; ++t) {
    ThreadCount threads(t + 1);
    dinp[t].assign(N * C, kNaN);
    dw[t].assign(C, 0.25f);
    db[t].assign(C, -0.25f);
    if (rms)
      cpu::rmsnorm_backward(dinp[t].data(), dw[t].data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    else
      cpu::layernorm_backward(dinp[t].data(), dw[t].data(), db[t].data(), dout.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
  }
  EXPECT_EQ(0, std::memcmp(dw[0].data(), dw[1].data(), C * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(db[0].data(), db[1].data(), C * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dinp[0].data(), dinp[1].data(), N * C * sizeof(float)));
}

}  // namespace

TEST(LayerNorm, ReferenceBackwardMatchesFiniteDifferences) {
  for (const auto& s : {std::array<int64_t, 2>{1, 1}, {7, 13}, {3, 100}}) check_reference_gradients(false, s[0], s[1]);
}

TEST(RmsNorm, ReferenceBackwardMatchesFiniteDifferences) {
  for (const auto& s : {std::array<int64_t, 2>{1, 1}, {7, 13}, {3, 100}}) check_reference_gradients(true, s[0], s[1]);
}

TEST(LayerNorm, MatchesReference) {
  for (const auto& s : kShapes) {
    check_kernel(false, true, s[0], s[1]);
    check_kernel(false, false, s[0], s[1]);
  }
}

TEST(RmsNorm, MatchesReference) {
  for (const auto& s : kShapes) check_kernel(true, false, s[0], s[1]);
}

TEST(LayerNorm, BackwardIsThreadCountIndependent) { check_thread_independence(false); }
TEST(RmsNorm, BackwardIsThreadCountIndependent) { check_thread_independence(true); }

// A constant row has zero variance: rstd = 1/sqrt(eps), out = bias, finite gradients.
TEST(LayerNorm, ConstantRowIsFinite) {
  const int64_t C = 13;
  std::vector<float> x(C, 3.25f), w(C, 2.0f), b = random_vector(C, 5), out(C, kNaN), dout = random_vector(C, 6);
  float mean = kNaN, rstd = kNaN;
  cpu::layernorm_forward(out.data(), &mean, &rstd, x.data(), w.data(), b.data(), 1, C, 1e-5f);
  EXPECT_EQ(mean, 3.25f);
  EXPECT_NEAR(rstd, 1.0 / std::sqrt(1e-5), 1e-2);
  EXPECT_EQ(out, b);
  std::vector<float> dinp(C, kNaN), dw(C, 0.0f), db(C, 0.0f);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), &mean, &rstd, 1, C);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_TRUE(std::isfinite(dinp[c]));
    EXPECT_EQ(dw[c], 0.0f);
    EXPECT_EQ(db[c], dout[c]);
  }
}
