// The grouped expert products (kernels/cpu/grouped_gemm.h, Backend::grouped_gemm_*) against a naive
// double-precision reference, on uneven loads with empty groups (first, inner and last) and segments that
// cross the tile boundaries, on one thread and on several; and against the per-group loop of gemm calls
// (Backend's default implementation), to fp32 rounding.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/grouped_gemm.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

// Uneven loads: empty groups at the start, inside and at the end, one large segment that is cut into
// several row pieces on several threads, single rows. The second: one group of a few rows holding
// nearly all the work, which is cut along its columns as well.
const std::vector<int64_t> kLoads = {0, 1, 300, 0, 129, 7, 0, 40, 0};
const std::vector<int64_t> kFewRowsDominate = {0, 40, 0, 3};

std::vector<int64_t> offsets_of(const std::vector<int64_t>& loads) {
  std::vector<int64_t> o{0};
  for (int64_t n : loads) o.push_back(o.back() + n);
  return o;
}

// Expert weights W_g [N, K], each its own allocation, as the experts' parameters are.
struct Weights {
  std::vector<std::vector<float>> w;
  std::vector<const float*> ptrs() const {
    std::vector<const float*> p;
    for (const auto& v : w) p.push_back(v.data());
    return p;
  }
  std::vector<float*> mutable_ptrs() {
    std::vector<float*> p;
    for (auto& v : w) p.push_back(v.data());
    return p;
  }
};
Weights random_weights(int64_t G, int64_t N, int64_t K, uint64_t seed) {
  Weights w;
  for (int64_t g = 0; g < G; ++g) w.w.push_back(random_vector(N * K, seed + static_cast<uint64_t>(g)));
  return w;
}

// |got - ref| <= tol * (sum of |terms|) for every element: a relative bound on fp32 summation.
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                  double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(static_cast<double>(got[i]) - ref[i]), tol * mag[i] + 1e-30) << what << " at " << i;
}

constexpr double kTol = 1e-5;  // fp32 dot products of at most a few hundred terms
const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Problem {
  std::vector<int64_t> off;
  int64_t G, P, N, K;
};

Problem problem(int64_t N, int64_t K, const std::vector<int64_t>& loads = kLoads) {
  Problem p{offsets_of(loads), static_cast<int64_t>(loads.size()), 0, N, K};
  p.P = p.off.back();
  return p;
}

void check_forward(const Problem& p) {
  const std::vector<float> X = random_vector(p.P * p.K, 1);
  const Weights W = random_weights(p.G, p.N, p.K, 100);
  std::vector<float> Y(p.P * p.N, kNaN);  // written without being read
  cpu::grouped_gemm_forward(p.G, p.off.data(), p.N, p.K, X.data(), W.ptrs().data(), Y.data());
  std::vector<double> ref(Y.size()), mag(Y.size());
  for (int64_t g = 0; g < p.G; ++g)
    for (int64_t r = p.off[g]; r < p.off[g + 1]; ++r)
      for (int64_t n = 0; n < p.N; ++n) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < p.K; ++k) {
          const double t = double(X[r * p.K + k]) * W.w[g][n * p.K + k];
          s += t, a += std::fabs(t);
        }
        ref[r * p.N + n] = s, mag[r * p.N + n] = a;
      }
  expect_close(Y, ref, mag, kTol, "forward");
}

void check_backward_data(const Problem& p) {
  const std::vector<float> dY = random_vector(p.P * p.N, 2);
  const Weights W = random_weights(p.G, p.N, p.K, 200);
  std::vector<float> dX(p.P * p.K, kNaN);
  cpu::grouped_gemm_backward_data(p.G, p.off.data(), p.N, p.K, dY.data(), W.ptrs().data(), dX.data());
  std::vector<double> ref(dX.size()), mag(dX.size());
  for (int64_t g = 0; g < p.G; ++g)
    for (int64_t r = p.off[g]; r < p.off[g + 1]; ++r)
      for (int64_t k = 0; k < p.K; ++k) {
        double s = 0, a = 0;
        for (int64_t n = 0; n < p.N; ++n) {
          const double t = double(dY[r * p.N + n]) * W.w[g][n * p.K + k];
          s += t, a += std::fabs(t);
        }
        ref[r * p.K + k] = s, mag[r * p.K + k] = a;
      }
  expect_close(dX, ref, mag, kTol, "backward data");
}

void check_backward_weight(const Problem& p) {
  const std::vector<float> dY = random_vector(p.P * p.N, 3), X = random_vector(p.P * p.K, 4);
  Weights dW = random_weights(p.G, p.N, p.K, 300);  // accumulated into
  const Weights dW0 = dW;
  cpu::grouped_gemm_backward_weight(p.G, p.off.data(), p.N, p.K, dY.data(), X.data(), dW.mutable_ptrs().data());
  for (int64_t g = 0; g < p.G; ++g) {
    if (p.off[g + 1] == p.off[g]) {
      EXPECT_EQ(dW.w[g], dW0.w[g]) << "an empty group's gradient changed (group " << g << ")";
      continue;
    }
    std::vector<double> ref(p.N * p.K), mag(p.N * p.K);
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t k = 0; k < p.K; ++k) {
        double s = dW0.w[g][n * p.K + k], a = std::fabs(s);
        for (int64_t r = p.off[g]; r < p.off[g + 1]; ++r) {
          const double t = double(dY[r * p.N + n]) * X[r * p.K + k];
          s += t, a += std::fabs(t);
        }
        ref[n * p.K + k] = s, mag[n * p.K + k] = a;
      }
    expect_close(dW.w[g], ref, mag, kTol, "backward weight, group " + std::to_string(g));
  }
}

// Runs fn with `threads` OpenMP threads, restoring the previous count.
template <typename Fn>
void with_threads(int threads, Fn&& fn) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(before);
}

}  // namespace

// Every product on 1 thread (whole groups) and on 3 (groups cut into pieces of uneven sizes).
TEST(GroupedGemm, MatchesTheDoubleReferenceOnUnevenLoads) {
  for (int threads : {1, 3})
    with_threads(threads, [&] {
      SCOPED_TRACE("threads " + std::to_string(threads));
      for (const auto& loads : {kLoads, kFewRowsDominate})
        for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{300, 70}, {33, 520}}) {
          SCOPED_TRACE("groups " + std::to_string(loads.size()) + " N " + std::to_string(N) + " K " + std::to_string(K));
          const Problem p = problem(N, K, loads);
          check_forward(p);
          check_backward_data(p);
          check_backward_weight(p);
        }
    });
}

// Against the per-group loop of gemm calls (the Backend's default definition, which the CPU backend
// overrides): each element the same fp32 dot product, its summation order oneDNN's, so equal to fp32
// rounding; rows of empty groups and their gradients untouched by both.
TEST(GroupedGemm, AgreesWithThePerGroupLoop) {
  const Backend& be = cpu_backend();
  const Problem p = problem(270, 96);
  const std::vector<float> X = random_vector(p.P * p.K, 5), dY = random_vector(p.P * p.N, 6);
  const Weights W = random_weights(p.G, p.N, p.K, 400);
  with_threads(2, [&] {
    std::vector<float> y1(p.P * p.N), y2(p.P * p.N), dx1(p.P * p.K), dx2(p.P * p.K);
    be.Backend::grouped_gemm_forward(p.G, p.off.data(), p.N, p.K, X.data(), W.ptrs().data(), y1.data());
    be.grouped_gemm_forward(p.G, p.off.data(), p.N, p.K, X.data(), W.ptrs().data(), y2.data());
    be.Backend::grouped_gemm_backward_data(p.G, p.off.data(), p.N, p.K, dY.data(), W.ptrs().data(), dx1.data());
    be.grouped_gemm_backward_data(p.G, p.off.data(), p.N, p.K, dY.data(), W.ptrs().data(), dx2.data());
    Weights dw1 = random_weights(p.G, p.N, p.K, 500), dw2 = dw1;
    be.Backend::grouped_gemm_backward_weight(p.G, p.off.data(), p.N, p.K, dY.data(), X.data(),
                                             dw1.mutable_ptrs().data());
    be.grouped_gemm_backward_weight(p.G, p.off.data(), p.N, p.K, dY.data(), X.data(), dw2.mutable_ptrs().data());
    for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 1e-5 * (1 + std::fabs(y1[i]))) << i;
    for (size_t i = 0; i < dx1.size(); ++i) ASSERT_NEAR(dx1[i], dx2[i], 1e-5 * (1 + std::fabs(dx1[i]))) << i;
    for (int64_t g = 0; g < p.G; ++g)
      for (size_t i = 0; i < dw1.w[g].size(); ++i)
        ASSERT_NEAR(dw1.w[g][i], dw2.w[g][i], 1e-5 * (1 + std::fabs(dw1.w[g][i]))) << "group " << g << " at " << i;
  });
}

// No rows at all (an expert-parallel rank that received none): nothing is read or written.
TEST(GroupedGemm, NoRowsTouchesNothing) {
  const std::vector<int64_t> off(5, 0);
  const Weights W = random_weights(4, 8, 6, 600);
  Weights dW = W;
  cpu::grouped_gemm_forward(4, off.data(), 8, 6, nullptr, W.ptrs().data(), nullptr);
  cpu::grouped_gemm_backward_data(4, off.data(), 8, 6, nullptr, W.ptrs().data(), nullptr);
  cpu::grouped_gemm_backward_weight(4, off.data(), 8, 6, nullptr, nullptr, dW.mutable_ptrs().data());
  EXPECT_EQ(dW.w, W.w);
}

TEST(GroupedGemm, BadOffsetsAreRefusedByName) {
  const Weights W = random_weights(2, 4, 4, 700);
  std::vector<float> x(16), y(16);
  const std::vector<int64_t> decreasing = {0, 3, 2}, late_start = {1, 2, 3};
  std::string err = test::error_of(
      [&] { cpu::grouped_gemm_forward(2, decreasing.data(), 4, 4, x.data(), W.ptrs().data(), y.data()); });
  EXPECT_NE(err.find("grouped_gemm_forward: offsets must not decrease"), std::string::npos) << err;
  err = test::error_of(
      [&] { cpu::grouped_gemm_backward_data(2, late_start.data(), 4, 4, x.data(), W.ptrs().data(), y.data()); });
  EXPECT_NE(err.find("grouped_gemm_backward_data: offsets must start at 0"), std::string::npos) << err;
}
