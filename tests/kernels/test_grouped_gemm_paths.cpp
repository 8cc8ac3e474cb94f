// The grouped weight gradient's own paths (kernels/cpu/grouped_gemm.h) against a naive double reference:
// its reduction cut over the rows, where a fine-grained expert (an output too small to cut into enough
// pieces) holds most of the rows on several threads, with empty groups first, inside and last beside
// it (and the other two products on the same loads), the same bits on every run for a given thread
// count; and the few-row loop for experts of under 8 rows, on widths that take its 32-, 8- and 1-column
// steps.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/grouped_gemm.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

// One group of 700 rows beside small and empty ones; outputs [N, K] of at most 64 x 64 cannot be cut
// into more than one piece, so on 3 threads the big group's 700 rows are cut instead.
const std::vector<int64_t> kLoads = {0, 700, 3, 0, 65, 1, 0};
constexpr int kThreads = 3;

std::vector<int64_t> offsets_of(const std::vector<int64_t>& loads) {
  std::vector<int64_t> o{0};
  for (int64_t n : loads) o.push_back(o.back() + n);
  return o;
}

template <typename Fn>
void with_threads(int threads, Fn&& fn) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(before);
}

std::vector<std::vector<float>> random_mats(int64_t G, int64_t n, uint64_t seed) {
  std::vector<std::vector<float>> m;
  for (int64_t g = 0; g < G; ++g) m.push_back(random_vector(n, seed + static_cast<uint64_t>(g)));
  return m;
}

struct Shape {
  int64_t N, K;
};

// dW_g = dW0_g + dY_g^T X_g through the grouped op on `threads` threads.
std::vector<std::vector<float>> grouped_weight_grad(const std::vector<int64_t>& off, Shape s,
                                                    const std::vector<float>& dY, const std::vector<float>& X,
                                                    const std::vector<std::vector<float>>& dW0,
                                                    int threads = kThreads) {
  std::vector<std::vector<float>> dW = dW0;
  std::vector<float*> ptrs;
  for (auto& m : dW) ptrs.push_back(m.data());
  with_threads(threads, [&] {
    cpu::grouped_gemm_backward_weight(static_cast<int64_t>(dW.size()), off.data(), s.N, s.K, dY.data(), X.data(),
                                      ptrs.data());
  });
  return dW;
}

// Every group's dW against the double reference: |got - ref| <= 1e-5 x the sum of the terms'
// magnitudes (fp32 summation rounding); an empty group's dW exactly as it was.
void expect_weight_grad_matches(const std::vector<int64_t>& off, Shape s, const std::vector<float>& dY,
                                const std::vector<float>& X, const std::vector<std::vector<float>>& dW0,
                                const std::vector<std::vector<float>>& dW) {
  for (size_t g = 0; g < dW.size(); ++g) {
    if (off[g + 1] == off[g]) {
      EXPECT_EQ(dW[g], dW0[g]) << "an empty group's gradient changed (group " << g << ")";
      continue;
    }
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t k = 0; k < s.K; ++k) {
        double ref = dW0[g][n * s.K + k], mag = std::fabs(ref);
        for (int64_t r = off[g]; r < off[g + 1]; ++r) {
          const double t = double(dY[r * s.N + n]) * X[r * s.K + k];
          ref += t, mag += std::fabs(t);
        }
        ASSERT_LE(std::fabs(dW[g][n * s.K + k] - ref), 1e-5 * mag + 1e-30)
            << "group " << g << " at (" << n << ", " << k << ")";
      }
  }
}

}  // namespace

// The case takes the cut-reduction path, and each group's result is within fp32 summation rounding of
// the double reference (|got - ref| <= 1e-5 x the sum of the terms' magnitudes); empty groups untouched.
TEST(GroupedGemmPaths, WeightGradientWithCutRowsMatchesTheDoubleReference) {
  const std::vector<int64_t> off = offsets_of(kLoads);
  const int64_t G = static_cast<int64_t>(kLoads.size()), P = off.back();
  for (const Shape s : {Shape{64, 64}, Shape{33, 40}, Shape{1, 5}}) {
    SCOPED_TRACE("N " + std::to_string(s.N) + " K " + std::to_string(s.K));
    ASSERT_GT(cpu::grouped_gemm_weight_reduction_pieces(G, off.data(), s.N, s.K, kThreads), 1)
        << "the case no longer cuts a reduction: it does not test that path";
    const std::vector<float> dY = random_vector(P * s.N, 1), X = random_vector(P * s.K, 2);
    const auto dW0 = random_mats(G, s.N * s.K, 10);
    expect_weight_grad_matches(off, s, dY, X, dW0, grouped_weight_grad(off, s, dY, X, dW0));
  }
}

// Experts of 1 to 7 rows (and none) take the few-row loop; widths 77 (two 32-column steps, one of 8,
// 5 single columns), 8 and 3; on one thread (whole outputs) and on three (outputs cut into row pieces).
TEST(GroupedGemmPaths, FewRowWeightGradientMatchesTheDoubleReference) {
  const std::vector<int64_t> off = offsets_of({0, 1, 7, 0, 2, 5, 3, 0});
  const int64_t G = static_cast<int64_t>(off.size()) - 1, P = off.back();
  for (int threads : {1, 3})
    for (const Shape s : {Shape{150, 77}, Shape{9, 8}, Shape{5, 3}}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " N " + std::to_string(s.N) + " K " + std::to_string(s.K));
      const std::vector<float> dY = random_vector(P * s.N, 7), X = random_vector(P * s.K, 8);
      const auto dW0 = random_mats(G, s.N * s.K, 40);
      expect_weight_grad_matches(off, s, dY, X, dW0, grouped_weight_grad(off, s, dY, X, dW0, threads));
    }
}

// For a given thread count the cut is fixed and the partial sums are added in the order of their rows,
// so repeated runs give the same bits.
TEST(GroupedGemmPaths, WeightGradientIsTheSameBitsOnEveryRun) {
  const std::vector<int64_t> off = offsets_of(kLoads);
  const int64_t G = static_cast<int64_t>(kLoads.size()), P = off.back();
  const Shape s{48, 64};
  const std::vector<float> dY = random_vector(P * s.N, 3), X = random_vector(P * s.K, 4);
  const auto dW0 = random_mats(G, s.N * s.K, 20);
  const auto first = grouped_weight_grad(off, s, dY, X, dW0);
  for (int run = 0; run < 5; ++run) EXPECT_EQ(grouped_weight_grad(off, s, dY, X, dW0), first) << "run " << run;
}

// The other two products on the same loads (whose outputs are cut by rows, never by reduction) against
// the double reference, on the same threads.
TEST(GroupedGemmPaths, ForwardAndInputGradientOnTheSameLoadsMatchTheDoubleReference) {
  const std::vector<int64_t> off = offsets_of(kLoads);
  const int64_t G = static_cast<int64_t>(kLoads.size()), P = off.back(), N = 40, K = 33;
  const std::vector<float> X = random_vector(P * K, 5), dY = random_vector(P * N, 6);
  const auto W = random_mats(G, N * K, 30);
  std::vector<const float*> wp;
  for (const auto& m : W) wp.push_back(m.data());
  std::vector<float> Y(P * N), dX(P * K);
  with_threads(kThreads, [&] {
    cpu::grouped_gemm_forward(G, off.data(), N, K, X.data(), wp.data(), Y.data());
    cpu::grouped_gemm_backward_data(G, off.data(), N, K, dY.data(), wp.data(), dX.data());
  });
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = off[g]; r < off[g + 1]; ++r) {
      for (int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double t = double(X[r * K + k]) * W[g][n * K + k];
          ref += t, mag += std::fabs(t);
        }
        ASSERT_LE(std::fabs(Y[r * N + n] - ref), 1e-5 * mag + 1e-30) << "forward row " << r << " col " << n;
      }
      for (int64_t k = 0; k < K; ++k) {
        double ref = 0, mag = 0;
        for (int64_t n = 0; n < N; ++n) {
          const double t = double(dY[r * N + n]) * W[g][n * K + k];
          ref += t, mag += std::fabs(t);
        }
        ASSERT_LE(std::fabs(dX[r * K + k] - ref), 1e-5 * mag + 1e-30) << "input gradient row " << r << " col " << k;
      }
    }
}
