// Pointwise kernels against double-precision references: GELU (tanh), SiLU, SwiGLU over the fused
// [gate | up] layout, bias add / backward, residual add, add_inplace, scale_inplace.
// The references' analytic derivatives are first checked by central differences in double; the fp32
// kernels are then compared with them element by element on awkward sizes (and one size large enough
// to take the threaded path), with outputs poisoned by NaN so an unwritten element fails.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/elementwise.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::numerical_gradient;
using megadlm::test::random_vector;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Sizes that are not multiples of any vector width; the last takes the OpenMP path.
const int64_t kSizes[] = {1, 7, 33, 100, 40001};

// Sets the OpenMP thread count for one scope.
struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int n) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

// Every element within rtol * |ref| + atol (NaN fails); reports the first offender.
void expect_close(const float* a, const double* ref, int64_t n, double rtol, double atol, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(e <= rtol * std::fabs(ref[i]) + atol)) {
      ADD_FAILURE() << what << "[" << i << "] = " << a[i] << ", reference " << ref[i] << " (n = " << n << ")";
      return;
    }
  }
}

// ---- double references --------------------------------------------------------------------------
const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);
double gelu_u(double x) { return kSqrt2OverPi * (x + 0.044715 * x * x * x); }
// The defining formula 0.5 x (1 + tanh(u)) loses everything to cancellation in 1 + tanh(u) once
// u < -18, even in double. The references use the identity 1 + tanh(u) = 2 sigmoid(2u) instead, and
// 1 - tanh(u)^2 = 4 s (1 - s) with s = sigmoid(2u), 1 - s = sigmoid(-2u).
double gelu_tanh_formula(double x) { return 0.5 * x * (1.0 + std::tanh(gelu_u(x))); }
double gelu_ref(double x) { return x / (1.0 + std::exp(-2.0 * gelu_u(x))); }
double gelu_grad_ref(double x) {
  const double u = gelu_u(x);
  const double s = 1.0 / (1.0 + std::exp(-2.0 * u)), one_minus_s = 1.0 / (1.0 + std::exp(2.0 * u));
  const double du = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
  return s + 2.0 * x * s * one_minus_s * du;
}
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu_ref(double x) { return x * sigmoid_ref(x); }
double silu_grad_ref(double x) {
  const double s = sigmoid_ref(x);
  return s * (1.0 + x * (1.0 - s));
}

// Inputs in [-8, 8] followed by a few values from the tails and around zero.
std::vector<float> pointwise_inputs(int64_t n, uint64_t seed) {
  std::vector<float> x = random_vector(n, seed, -8.0f, 8.0f);
  const float special[] = {0.0f, -0.0f, 1e-6f, -1e-6f, 30.0f, -30.0f, 100.0f, -100.0f, 1e4f, -1e4f};
  for (int64_t i = 0; i < n && i < 10; ++i) x[n - 1 - i] = special[i];
  return x;
}

using Fwd = void (*)(float*, const float*, int64_t);
using Bwd = void (*)(float*, const float*, const float*, int64_t);

// Forward and backward of one pointwise activation against its references, out of place and in place.
// rtol: GELU's output for x << 0 is exp(-2u(x)) with u ~ x^3, so the fp32 rounding of u alone moves it
// by up to ~1e-5 relative at x = -8 (condition number ~150); SiLU is far better conditioned.
void check_activation(Fwd fwd, Bwd bwd, double (*f)(double), double (*df)(double), double rtol,
                      const char* name) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << name << " n = " << n);
    const std::vector<float> x = pointwise_inputs(n, 100 + n);
    const std::vector<float> dout = random_vector(n, 200 + n);
    std::vector<double> y_ref(n), dx_ref(n);
    for (int64_t i = 0; i < n; ++i) {
      y_ref[i] = f(x[i]);
      dx_ref[i] = df(x[i]) * dout[i];
    }
    std::vector<float> y(n, kNaN), dx(n, kNaN);
    fwd(y.data(), x.data(), n);
    expect_close(y.data(), y_ref.data(), n, rtol, 1e-7, "out");
    bwd(dx.data(), x.data(), dout.data(), n);
    expect_close(dx.data(), dx_ref.data(), n, rtol, 1e-6, "dinp");
    // In place (out == inp, dinp == dout) gives the same bits.
    std::vector<float> y2 = x, dx2 = dout;
    fwd(y2.data(), y2.data(), n);
    bwd(dx2.data(), x.data(), dx2.data(), n);
    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), n * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dx.data(), dx2.data(), n * sizeof(float)));
  }
  // Divergence must stay visible: NaN in, NaN out.
  float nan_in = kNaN, out = 0.0f, one = 1.0f;
  fwd(&out, &nan_in, 1);
  EXPECT_TRUE(std::isnan(out)) << name;
  bwd(&out, &nan_in, &one, 1);
  EXPECT_TRUE(std::isnan(out)) << name;
}

}  // namespace

// The references' derivatives agree with central differences of the references.
TEST(Elementwise, ReferenceDerivativesMatchFiniteDifferences) {
  for (double x0 : {-7.5, -3.0, -0.75, -0.1, 0.0, 0.3, 1.0, 2.5, 6.0}) {
    std::vector<double> x{x0};
    EXPECT_NEAR(gelu_ref(x0), gelu_tanh_formula(x0), 1e-15) << "gelu identity at " << x0;
    const auto g_gelu = numerical_gradient<double>(x, [&] { return gelu_tanh_formula(x[0]); }, 1e-6);
    EXPECT_NEAR(g_gelu[0], gelu_grad_ref(x0), 1e-8) << "gelu at " << x0;
    const auto g_silu = numerical_gradient<double>(x, [&] { return silu_ref(x[0]); }, 1e-6);
    EXPECT_NEAR(g_silu[0], silu_grad_ref(x0), 1e-8) << "silu at " << x0;
  }
}

TEST(Elementwise, GeluTanhMatchesReference) {
  check_activation(cpu::gelu_forward, cpu::gelu_backward, gelu_ref, gelu_grad_ref, 1e-5, "gelu");
}

TEST(Elementwise, SiluMatchesReference) {
  check_activation(cpu::silu_forward, cpu::silu_backward, silu_ref, silu_grad_ref, 1e-6, "silu");
}

TEST(Elementwise, GeluKnownValues) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) evaluated independently at x = 1, -1, 3.
  const float x[] = {1.0f, -1.0f, 3.0f};
  float y[3];
  cpu::gelu_forward(y, x, 3);
  EXPECT_NEAR(y[0], 0.8411919906082768, 1e-6);
  EXPECT_NEAR(y[1], -0.15880800939172324, 1e-6);
  EXPECT_NEAR(y[2], 2.9963625565477422, 1e-6);
}

// SwiGLU: out = silu(gate) * up over [gate | up] rows. The double reference's backward is checked by
// central differences of sum(out * dout); the kernel against the reference.
TEST(Elementwise, SwigluForwardBackward) {
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}, {9, 1900}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], F = s[1];
    SCOPED_TRACE(::testing::Message() << "N = " << N << " F = " << F);
    const std::vector<float> gu = random_vector(N * 2 * F, 300 + N * F, -6.0f, 6.0f);
    const std::vector<float> dout = random_vector(N * F, 400 + N * F);
    std::vector<double> y_ref(N * F), dgu_ref(N * 2 * F);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t i = 0; i < F; ++i) {
        const double g = gu[r * 2 * F + i], u = gu[r * 2 * F + F + i], d = dout[r * F + i];
        y_ref[r * F + i] = silu_ref(g) * u;
        dgu_ref[r * 2 * F + i] = d * u * silu_grad_ref(g);
        dgu_ref[r * 2 * F + F + i] = d * silu_ref(g);
      }
    if (N * F <= 100) {  // central differences of the double reference (O(size^2))
      std::vector<double> x = megadlm::test::to_double(gu);
      const auto loss = [&] {
        double l = 0.0;
        for (int64_t r = 0; r < N; ++r)
          for (int64_t i = 0; i < F; ++i)
            l += silu_ref(x[r * 2 * F + i]) * x[r * 2 * F + F + i] * dout[r * F + i];
        return l;
      };
      const auto num = numerical_gradient<double>(x, loss, 1e-6);
      for (size_t i = 0; i < num.size(); ++i) EXPECT_NEAR(num[i], dgu_ref[i], 1e-7) << "element " << i;
    }
    std::vector<float> y(N * F, kNaN), dgu(N * 2 * F, kNaN);
    cpu::swiglu_forward(y.data(), gu.data(), N, F);
    expect_close(y.data(), y_ref.data(), N * F, 1e-5, 1e-6, "swiglu out");
    cpu::swiglu_backward(dgu.data(), gu.data(), dout.data(), N, F);
    expect_close(dgu.data(), dgu_ref.data(), N * 2 * F, 1e-5, 1e-6, "swiglu dgate_up");
    std::vector<float> inplace = gu;  // dgate_up over gate_up: the same bits
    cpu::swiglu_backward(inplace.data(), inplace.data(), dout.data(), N, F);
    EXPECT_EQ(0, std::memcmp(inplace.data(), dgu.data(), N * 2 * F * sizeof(float)));
  }
}

TEST(Elementwise, BiasAddAndBackward) {
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}, {200, 333}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], C = s[1];
    SCOPED_TRACE(::testing::Message() << "N = " << N << " C = " << C);
    const std::vector<float> x = random_vector(N * C, 500 + N * C);
    const std::vector<float> bias = random_vector(C, 600 + C);
    std::vector<float> y = x;
    cpu::bias_add_forward(y.data(), bias.data(), N, C);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(y[r * C + c], x[r * C + c] + bias[c]);

    // dbias accumulates: start from a non-zero value.
    const std::vector<float> dbias0 = random_vector(C, 700 + C);
    std::vector<double> ref(dbias0.begin(), dbias0.end());
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) ref[c] += x[r * C + c];
    std::vector<float> dbias = dbias0;
    cpu::bias_backward(dbias.data(), x.data(), N, C);
    expect_close(dbias.data(), ref.data(), C, 1e-6, 1e-6, "dbias");
  }
}

// The row reduction of bias_backward gives the same bits for 1 and 2 threads.
TEST(Elementwise, BiasBackwardIsThreadCountIndependent) {
  const int64_t N = 517, C = 300;  // several column blocks, large enough for the threaded path
  const std::vector<float> dout = random_vector(N * C, 800, -3.0f, 3.0f);
  std::vector<float> one(C, 0.5f), two(C, 0.5f);
  {
    ThreadCount t(1);
    cpu::bias_backward(one.data(), dout.data(), N, C);
  }
  {
    ThreadCount t(2);
    cpu::bias_backward(two.data(), dout.data(), N, C);
  }
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), C * sizeof(float)));
}

// The bf16 Linear backward's one pass over dout gives the bits of bias_backward and cast_f32_to_bf16,
// and both give those of the plain loop (each column's rows summed in fp32 in groups of 16, in order,
// the groups' sums in double, then added; N = 517 ends on a partial group),
// for 1 and 2 threads, over whole column blocks with a tail (C = 300) and a single short one (C = 5).
TEST(Elementwise, CastBf16AndBiasBackwardIsTheTwoOps) {
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{517, 300}, {9, 5}}) {
    std::vector<float> dout = random_vector(N * C, 810 + C, -3.0f, 3.0f);
    dout[0] = std::numeric_limits<float>::quiet_NaN();  // a NaN is cast to a quiet NaN and sums to NaN
    std::vector<float> ref_bias(C, 0.5f);
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (int64_t r0 = 0; r0 < N; r0 += 16) {
        float group = 0.0f;
        for (int64_t r = r0; r < std::min(N, r0 + 16); ++r) group += dout[r * C + c];
        acc += group;
      }
      ref_bias[c] += static_cast<float>(acc);
    }
    std::vector<uint16_t> ref_cast(N * C);
    for (int64_t i = 0; i < N * C; ++i) ref_cast[i] = f32_to_bf16(dout[i]);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "N = " << N << " C = " << C << ", " << threads << " threads");
      ThreadCount t(threads);
      std::vector<float> dbias(C, 0.5f), dbias_only(C, 0.5f);
      std::vector<uint16_t> cast(N * C, 0x1234);
      cpu::cast_bf16_and_bias_backward(cast.data(), dbias.data(), dout.data(), N, C);
      cpu::bias_backward(dbias_only.data(), dout.data(), N, C);
      EXPECT_EQ(0, std::memcmp(dbias.data(), ref_bias.data(), C * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(dbias_only.data(), ref_bias.data(), C * sizeof(float)));
      EXPECT_EQ(cast, ref_cast);
      EXPECT_TRUE(std::isnan(dbias[0]));
    }
  }
}

// fc1's bias added inside the one-pass bf16 GELU gives the bits of bias_add_forward followed by it, with
// and without the kept copy, for 1 and 2 threads, at row widths with and without whole 64-column groups.
TEST(Elementwise, Bf16GeluWithBiasEqualsBiasAddThenGelu) {
  for (int threads : {1, 2}) {
    ThreadCount t(threads);
    for (int64_t F : {1, 37, 64, 600, 1536}) {
      SCOPED_TRACE(::testing::Message() << "F = " << F << ", " << threads << " threads");
      const int64_t N = 53;
      const std::vector<float> h = random_vector(N * F, 1300 + F, -6.0f, 6.0f);
      const std::vector<float> bias = random_vector(F, 1400 + F, -2.0f, 2.0f);
      std::vector<float> hb = h;
      cpu::bias_add_forward(hb.data(), bias.data(), N, F);
      std::vector<uint16_t> ref(N * F, 0x7FC0), ref_kept(N * F, 0x7FC0);
      cpu::gelu_forward_bf16(ref.data(), ref_kept.data(), hb.data(), N * F);
      std::vector<uint16_t> out(N * F, 0x1234), kept(N * F, 0x1234), alone(N * F, 0x1234);
      cpu::gelu_forward_bf16(out.data(), kept.data(), h.data(), bias.data(), N, F);
      cpu::gelu_forward_bf16(alone.data(), nullptr, h.data(), bias.data(), N, F);
      EXPECT_EQ(out, ref);
      EXPECT_EQ(kept, ref_kept);
      EXPECT_EQ(alone, ref);
    }
  }
}

// The one-pass bf16 MLP activations give the bits of the four passes they replace (cast, cast back,
// the fp32 activation, cast), with and without the kept copy, for 1 and 2 threads; an input that is
// already bf16 (the backward's remake) gives the same bits again, also read from the kept bf16 copy,
// and the backwards reading that copy give the fp32 backwards' bits on its widened values.
TEST(Elementwise, Bf16ActivationsEqualTheCastSequence) {
  auto round = [](const std::vector<float>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
    return r;
  };
  for (int threads : {1, 2}) {
    ThreadCount t(threads);
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << "GELU n = " << n << ", " << threads << " threads");
      std::vector<float> h = random_vector(n, 1100 + n, -6.0f, 6.0f);
      h[0] = 1e4f;  // saturated
      const std::vector<float> hr = round(h);
      std::vector<float> ref(n);
      cpu::gelu_forward(ref.data(), hr.data(), n);
      std::vector<uint16_t> out(n, 0x7FC0), kept(n, 0x7FC0), again(n, 0x7FC0);
      cpu::gelu_forward_bf16(out.data(), kept.data(), h.data(), n);
      cpu::gelu_forward_bf16(again.data(), nullptr, hr.data(), n);
      // From the kept bf16 copy (the backward's remake), and the backward reading it: the bits of the
      // fp32 kernels on its widened values.
      std::vector<uint16_t> remade(n, 0x7FC0);
      cpu::gelu_forward_bf16(remade.data(), kept.data(), n);
      const std::vector<float> dout = random_vector(n, 1150 + n, -1.0f, 1.0f);
      std::vector<float> d32(n, NAN), d16(n, NAN);
      cpu::gelu_backward(d32.data(), hr.data(), dout.data(), n);
      cpu::gelu_backward(d16.data(), kept.data(), dout.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(kept[i], f32_to_bf16(h[i])) << i;
        ASSERT_EQ(out[i], f32_to_bf16(ref[i])) << i;
        ASSERT_EQ(again[i], out[i]) << i;
        ASSERT_EQ(remade[i], out[i]) << i;
      }
      EXPECT_EQ(0, std::memcmp(d16.data(), d32.data(), n * sizeof(float)));
    }
    for (int64_t F : {1, 37, 600}) {
      SCOPED_TRACE(::testing::Message() << "SwiGLU F = " << F << ", " << threads << " threads");
      const int64_t N = 67;
      const std::vector<float> gu = random_vector(N * 2 * F, 1200 + F, -5.0f, 5.0f);
      const std::vector<float> gur = round(gu);
      std::vector<float> ref(N * F);
      cpu::swiglu_forward(ref.data(), gur.data(), N, F);
      std::vector<uint16_t> out(N * F, 0x7FC0), kept(N * 2 * F, 0x7FC0), again(N * F, 0x7FC0);
      cpu::swiglu_forward_bf16(out.data(), kept.data(), gu.data(), N, F);
      cpu::swiglu_forward_bf16(again.data(), nullptr, gur.data(), N, F);
      std::vector<uint16_t> remade(N * F, 0x7FC0);
      cpu::swiglu_forward_bf16(remade.data(), kept.data(), N, F);
      const std::vector<float> dout = random_vector(N * F, 1250 + F, -1.0f, 1.0f);
      std::vector<float> d32(N * 2 * F, NAN), d16(N * 2 * F, NAN);
      cpu::swiglu_backward(d32.data(), gur.data(), dout.data(), N, F);
      cpu::swiglu_backward(d16.data(), kept.data(), dout.data(), N, F);
      for (int64_t i = 0; i < N * 2 * F; ++i) ASSERT_EQ(kept[i], f32_to_bf16(gu[i])) << i;
      for (int64_t i = 0; i < N * F; ++i) {
        ASSERT_EQ(out[i], f32_to_bf16(ref[i])) << i;
        ASSERT_EQ(again[i], out[i]) << i;
        ASSERT_EQ(remade[i], out[i]) << i;
      }
      EXPECT_EQ(0, std::memcmp(d16.data(), d32.data(), N * 2 * F * sizeof(float)));
      // Rounded to bf16 as it is made (for fc1's bf16 products): the fp32 gradient's bits cast.
      std::vector<uint16_t> db(N * 2 * F, 0x7FC0);
      cpu::swiglu_backward_bf16(db.data(), kept.data(), dout.data(), N, F);
      for (int64_t i = 0; i < N * 2 * F; ++i) ASSERT_EQ(db[i], f32_to_bf16(d32[i])) << i;
    }
  }
}

// fc1's GELU gradient for its bf16 products in one pass: the bits of gelu_backward on the kept bf16 h
// followed by cast_bf16_and_bias_backward (and, with the remake, of gelu_forward_bf16), for 1 and 2 threads, over whole column blocks with a tail
// (F = 300), a single short block (F = 5) and without a bias; saturated and NaN inputs included.
TEST(Elementwise, GeluBackwardBf16AndBiasIsTheTwoOps) {
  for (const auto& [N, F] : {std::pair<int64_t, int64_t>{517, 300}, {9, 5}, {64, 128}}) {
    std::vector<uint16_t> h(N * F);
    const std::vector<float> hf = random_vector(N * F, 1300 + F, -6.0f, 6.0f);
    for (int64_t i = 0; i < N * F; ++i) h[i] = f32_to_bf16(hf[i]);
    h[1] = f32_to_bf16(-30.0f);
    h[2] = f32_to_bf16(30.0f);
    h[3] = 0x7FC0;  // NaN: its gradient, and so its column's sum, is NaN
    const std::vector<float> dout = random_vector(N * F, 1310 + F, -1.0f, 1.0f);
    std::vector<float> d32(N * F);
    cpu::gelu_backward(d32.data(), h.data(), dout.data(), N * F);
    std::vector<float> ref_bias(F, 0.25f);
    std::vector<uint16_t> ref_cast(N * F);
    cpu::cast_bf16_and_bias_backward(ref_cast.data(), ref_bias.data(), d32.data(), N, F);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "N = " << N << " F = " << F << ", " << threads << " threads");
      ThreadCount t(threads);
      std::vector<float> dbias(F, 0.25f);
      std::vector<uint16_t> d16(N * F, 0x1234), no_bias(N * F, 0x1234);
      cpu::gelu_backward_bf16_and_bias(d16.data(), dbias.data(), h.data(), dout.data(), N, F);
      cpu::gelu_backward_bf16_and_bias(no_bias.data(), nullptr, h.data(), dout.data(), N, F);
      EXPECT_EQ(d16, ref_cast);
      EXPECT_EQ(no_bias, ref_cast);
      EXPECT_EQ(0, std::memcmp(dbias.data(), ref_bias.data(), F * sizeof(float)));
      EXPECT_TRUE(std::isnan(dbias[3]));
      // With the activation remade in the same pass: the remake's bits too (gelu_forward_bf16 on h).
      std::vector<uint16_t> remade(N * F, 0x1234), ref_remade(N * F), d_fused(N * F, 0x1234);
      std::vector<float> bias_fused(F, 0.25f);
      cpu::gelu_forward_bf16(ref_remade.data(), h.data(), N * F);
      cpu::gelu_remake_and_backward_bf16(remade.data(), d_fused.data(), bias_fused.data(), h.data(), dout.data(), N, F);
      EXPECT_EQ(remade, ref_remade);
      EXPECT_EQ(d_fused, ref_cast);
      EXPECT_EQ(0, std::memcmp(bias_fused.data(), ref_bias.data(), F * sizeof(float)));
    }
  }
}

TEST(Elementwise, ResidualAddInplaceAndScale) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n = " << n);
    const std::vector<float> a = random_vector(n, 900 + n), b = random_vector(n, 1000 + n);
    std::vector<float> out(n, kNaN);
    cpu::residual_add(out.data(), a.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
    std::vector<float> alias_a = a, alias_b = b;  // out aliasing either input
    cpu::residual_add(alias_a.data(), alias_a.data(), b.data(), n);
    cpu::residual_add(alias_b.data(), a.data(), alias_b.data(), n);
    EXPECT_EQ(alias_a, out);
    EXPECT_EQ(alias_b, out);
    std::vector<float> acc = a;
    cpu::add_inplace(acc.data(), b.data(), n);
    EXPECT_EQ(acc, out);
    std::vector<float> sc = a;
    cpu::scale_inplace(sc.data(), -0.375f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sc[i], a[i] * -0.375f) << i;
  }
}
