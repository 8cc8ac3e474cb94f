// Rotary embedding (HuggingFace LLaMA rotate-half convention): tables against double precision for
// both common bases, hand-computed values that pin the pairing (i with i + D/2, not i with i + 1),
// identity at position 0, forward against a double reference, backward against central differences,
// backward(forward(x)) = x, and in-place operation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/rope.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::max_rel_error;
using megadlm::test::numerical_gradient;
using megadlm::test::random_vector;
using megadlm::test::to_double;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Tables {
  std::vector<float> cos, sin;
};
Tables make_tables(int64_t P, int64_t D, double base) {
  Tables t{std::vector<float>(P * D / 2, kNaN), std::vector<float>(P * D / 2, kNaN)};
  cpu::rope_tables(t.cos.data(), t.sin.data(), P, D, base);
  return t;
}

// Positions in [0, P), deterministic.
std::vector<int32_t> make_positions(int64_t N, int64_t P, uint64_t seed) {
  const std::vector<float> u = random_vector(N, seed, 0.0f, 1.0f);
  std::vector<int32_t> pos(N);
  for (int64_t n = 0; n < N; ++n) pos[n] = static_cast<int32_t>(std::fmin(u[n] * P, P - 1));
  return pos;
}

// out [N,H,D] in double, angles computed in double from the definition.
std::vector<double> rope_ref(const std::vector<double>& x, const std::vector<int32_t>& pos, int64_t N, int64_t H,
                             int64_t D, double base) {
  const int64_t half = D / 2;
  std::vector<double> out(N * H * D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double a = pos[n] * std::pow(base, -2.0 * i / D);
        const double x1 = x[(n * H + h) * D + i], x2 = x[(n * H + h) * D + i + half];
        out[(n * H + h) * D + i] = x1 * std::cos(a) - x2 * std::sin(a);
        out[(n * H + h) * D + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  return out;
}

}  // namespace

TEST(Rope, TablesMatchDoublePrecision) {
  for (double base : {10000.0, 1e6}) {
    const int64_t P = 4099, D = 14;  // large positions: the angle must not drift
    const Tables t = make_tables(P, D, base);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t i = 0; i < D / 2; ++i) {
        const double a = static_cast<double>(p) * std::pow(base, -2.0 * i / D);
        ASSERT_NEAR(t.cos[p * D / 2 + i], std::cos(a), 1e-7) << "base " << base << " p " << p << " i " << i;
        ASSERT_NEAR(t.sin[p * D / 2 + i], std::sin(a), 1e-7) << "base " << base << " p " << p << " i " << i;
      }
    // Position 0 is exactly the identity rotation; frequency 0 has angle = position.
    for (int64_t i = 0; i < D / 2; ++i) {
      EXPECT_EQ(t.cos[i], 1.0f);
      EXPECT_EQ(t.sin[i], 0.0f);
    }
    EXPECT_EQ(t.cos[(P - 1) * D / 2], static_cast<float>(std::cos(static_cast<double>(P - 1))));
  }
}

// Hand-computed: D = 4, x = (1, 2, 3, 4): pairs (x0, x2) rotate by p, (x1, x3) by p * base^(-1/2).
TEST(Rope, KnownValuesRotateHalf) {
  struct Case {
    double base;
    int32_t pos;
    double out[4];
  };
  const Case cases[] = {
      {1e4, 1, {-1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994}},
      {1e4, 3, {-1.413352520780047, 1.8791180666879925, -2.828857481741469, 4.058191135400942}},
      {1e6, 1, {-1.9841106485555495, 1.99599900066675, 2.4623779024123156, 4.001997999666833}},
      {1e6, 3, {-1.413352520780047, 1.987991018006742, -2.828857481741469, 4.005981991013504}},
  };
  for (const Case& c : cases) {
    const Tables t = make_tables(4, 4, c.base);
    const float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float out[4] = {kNaN, kNaN, kNaN, kNaN};
    cpu::rope_forward(out, x, &c.pos, t.cos.data(), t.sin.data(), 1, 1, 4);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], c.out[i], 1e-6) << "base " << c.base << " pos " << c.pos;
  }
}

TEST(Rope, PositionZeroIsIdentity) {
  const int64_t N = 7, H = 3, D = 14;
  const Tables t = make_tables(5, D, 10000.0);
  const std::vector<float> x = random_vector(N * H * D, 1);
  const std::vector<int32_t> pos(N, 0);
  std::vector<float> out(N * H * D, kNaN), back(N * H * D, kNaN);
  cpu::rope_forward(out.data(), x.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
  EXPECT_EQ(out, x);
  cpu::rope_backward(back.data(), x.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
  EXPECT_EQ(back, x);
}

TEST(Rope, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  const int64_t P = 2048;
  for (double base : {10000.0, 1e6})
    for (int64_t N : {1, 7, 33})
      for (int64_t H : {1, 3})
        for (int64_t D : {2, 14, 64}) {
          SCOPED_TRACE(::testing::Message() << "base " << base << " N " << N << " H " << H << " D " << D);
          const Tables t = make_tables(P, D, base);
          const std::vector<int32_t> pos = make_positions(N, P, 10 + N);
          const std::vector<float> x = random_vector(N * H * D, 20 + N * H * D);
          const std::vector<float> dout = random_vector(N * H * D, 30 + N * H * D);
          std::vector<float> out(N * H * D, kNaN), dinp(N * H * D, kNaN);
          cpu::rope_forward(out.data(), x.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
          const std::vector<double> ref = rope_ref(to_double(x), pos, N, H, D, base);
          EXPECT_LT(max_rel_error(out.data(), ref.data(), N * H * D), 1e-6);
          cpu::rope_backward(dinp.data(), dout.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
          if (N * H * D <= 500) {  // central differences of sum(rope_ref(x) * dout), in double
            std::vector<double> xd = to_double(x);
            const auto loss = [&] {
              const std::vector<double> y = rope_ref(xd, pos, N, H, D, base);
              double s = 0.0;
              for (size_t i = 0; i < y.size(); ++i) s += y[i] * dout[i];
              return s;
            };
            const std::vector<double> g = numerical_gradient<double>(xd, loss, 1e-6);
            EXPECT_LT(max_rel_error(dinp.data(), g.data(), N * H * D), 1e-6);
          }
          // The rotation is orthogonal: backward undoes forward.
          std::vector<float> back(N * H * D, kNaN);
          cpu::rope_backward(back.data(), out.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
          EXPECT_LT(max_rel_error(back.data(), to_double(x).data(), N * H * D), 1e-6);
          // In place gives the same bits.
          std::vector<float> inplace = x, dinplace = dout;
          cpu::rope_forward(inplace.data(), inplace.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
          cpu::rope_backward(dinplace.data(), dinplace.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
          EXPECT_EQ(0, std::memcmp(inplace.data(), out.data(), N * H * D * sizeof(float)));
          EXPECT_EQ(0, std::memcmp(dinplace.data(), dinp.data(), N * H * D * sizeof(float)));
        }
}

// Large enough to take the threaded path.
TEST(Rope, ThreadedSizeMatchesReference) {
  const int64_t N = 130, H = 5, D = 64, P = 4096;
  const Tables t = make_tables(P, D, 1e6);
  const std::vector<int32_t> pos = make_positions(N, P, 3);
  const std::vector<float> x = random_vector(N * H * D, 4);
  std::vector<float> out(N * H * D, kNaN);
  cpu::rope_forward(out.data(), x.data(), pos.data(), t.cos.data(), t.sin.data(), N, H, D);
  const std::vector<double> ref = rope_ref(to_double(x), pos, N, H, D, 1e6);
  EXPECT_LT(max_rel_error(out.data(), ref.data(), N * H * D), 1e-6);
}
