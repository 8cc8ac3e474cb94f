// fp8 products by definition (kernels/cpu/fp8_gemm.h) against a double reference that decodes each code
// with core/dtype.h's scalar conversion: E4M3 x E4M3 and E5M2 x E4M3 (the hybrid recipe's gradient
// products), beta 0 (C holding NaN is not read) and beta 1 (accumulation); and the byte transpose, on
// shapes that are no multiple of its tile, bitwise and independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/fp8_gemm.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

// n random fp8 codes of finite values (NaN codes excluded: the products would be NaN).
std::vector<uint8_t> random_codes(int64_t n, bool e5m2, uint64_t seed) {
  const auto u = random_vector(n, seed, -300.0f, 300.0f);
  std::vector<uint8_t> c(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) c[i] = e5m2 ? f32_to_e5m2(u[i]) : f32_to_e4m3(u[i]);
  return c;
}

double decode(uint8_t c, bool e5m2) { return e5m2 ? e5m2_to_f32(c) : e4m3_to_f32(c); }

TEST(Fp8Gemm, MatchesTheDoubleReference) {
  const int64_t M = 37, N = 53, K = 70;
  for (bool a_e5m2 : {false, true})
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << "A " << (a_e5m2 ? "e5m2" : "e4m3") << ", beta " << beta);
      const auto A = random_codes(M * K, a_e5m2, 1), B = random_codes(N * K, false, 2);
      const float sa = 1.0f / 64, sb = 1.0f / 448;
      const auto C0 = random_vector(M * N, 3);
      std::vector<float> C(C0);
      if (beta == 0.0f) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
      cpu::gemm_fp8(M, N, K, A.data(), a_e5m2, sa, B.data(), false, sb, beta, C.data());
      double worst = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double ref = beta * C0[m * N + n], scale = std::abs(ref);
          for (int64_t k = 0; k < K; ++k) {
            const double p = decode(A[m * K + k], a_e5m2) * sa * decode(B[n * K + k], false) * sb;
            ref += p;
            scale += std::abs(p);
          }
          ASSERT_TRUE(std::isfinite(C[m * N + n])) << m << "," << n;
          worst = std::max(worst, std::abs(C[m * N + n] - ref) / (scale + 1e-30));
        }
      EXPECT_LT(worst, 1e-5);  // fp32 accumulation of exactly representable products
    }
}

TEST(Fp8Gemm, TransposeIsExactAtAnyThreadCount) {
  const int threads_before = omp_get_max_threads();
  for (auto [R, C] : {std::pair<int64_t, int64_t>{1, 1}, {70, 131}, {300, 257}, {1024, 96}}) {
    std::vector<uint8_t> in(static_cast<size_t>(R * C));
    for (int64_t i = 0; i < R * C; ++i) in[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<uint8_t> out(in.size(), 0xAB);
      cpu::transpose_u8(out.data(), in.data(), R, C);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(out[c * R + r], in[r * C + c]) << R << "x" << C << " at " << r << "," << c << ", " << threads
                                                   << " threads";
    }
  }
  omp_set_num_threads(threads_before);
}

}  // namespace
