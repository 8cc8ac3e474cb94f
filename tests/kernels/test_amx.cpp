// The AMX bf16 tile product (kernels/cpu/amx.h) against a double-precision product of the same bf16
// values, with strided operands, accumulation and a scale; the operand-role symmetry the bf16 attention
// relies on; the on/off switch. On a machine without AMX-BF16 (CPU, build or OS permission) the product
// tests skip and say so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/amx.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

// n random values in [-amp, amp) as bf16 bits.
std::vector<uint16_t> random_bf16_bits(int64_t n, uint64_t seed, float amp = 1.0f) {
  const std::vector<float> r = random_vector(n, seed, -amp, amp);
  std::vector<uint16_t> b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16(r[i]);
  return b;
}

// The matrix Bm [K, W] (bf16 bits, row stride ldm) in VNNI words [K/2, W] with row stride ldb.
std::vector<uint32_t> vnni(const std::vector<uint16_t>& Bm, int64_t ldm, int64_t K, int64_t W, int64_t ldb) {
  std::vector<uint32_t> words(K / 2 * ldb, 0xffffffffu);  // padding columns: NaN pairs, never read
  for (int64_t p = 0; p < K / 2; ++p)
    for (int64_t w = 0; w < W; ++w)
      words[p * ldb + w] = uint32_t(Bm[2 * p * ldm + w]) | (uint32_t(Bm[(2 * p + 1) * ldm + w]) << 16);
  return words;
}

struct Case {
  int64_t rows, W, kp;
  int64_t lda_pad, ldb_pad, ldc_pad;  // extra elements / words / floats per row
};

}  // namespace

// C = mul * A B and C += A B on a few shapes, each operand with a row stride wider than its rows (the
// padding holds NaN, so reading it would show). Error bound: fp32 accumulation of K products of bf16
// values, relative to the sum of the terms' magnitudes.
TEST(Amx, TileProductMatchesDoubleReference) {
  if (!cpu::amx::available()) GTEST_SKIP() << "no AMX-BF16 here (CPU, build or OS permission)";
  const Case cases[] = {{64, 64, 32, 0, 0, 0}, {32, 96, 48, 8, 16, 5}, {96, 32, 16, 32, 4, 32}};
  uint64_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " W " << c.W << " kp " << c.kp);
    const int64_t K = 2 * c.kp, lda = K + c.lda_pad, ldb = c.W + c.ldb_pad, ldc = c.W + c.ldc_pad;
    std::vector<uint16_t> A = random_bf16_bits(c.rows * lda, seed++, 2.0f);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t k = K; k < lda; ++k) A[r * lda + k] = 0x7fc0;  // NaN padding
    const std::vector<uint16_t> Bm = random_bf16_bits(K * c.W, seed++);
    const std::vector<uint32_t> B = vnni(Bm, c.W, K, c.W, ldb);
    const std::vector<float> C0 = random_vector(c.rows * ldc, seed++, -3.0f, 3.0f);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "C += A B" : "C = 0.75 A B");
      const float mul = 0.75f;
      std::vector<float> C = C0;
      {
        const cpu::amx::TileScope tiles(true);
        cpu::amx::tile_product(C.data(), ldc, A.data(), lda, B.data(), ldb, c.rows, c.kp, c.W, accumulate, mul);
      }
      double worst = 0;
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t w = 0; w < ldc; ++w) {
          const float got = C[r * ldc + w];
          if (w >= c.W) {  // columns past W are not written
            EXPECT_EQ(std::memcmp(&got, &C0[r * ldc + w], 4), 0) << "padding column " << w << " of row " << r;
            continue;
          }
          double sum = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double t = double(bf16_to_f32(A[r * lda + k])) * bf16_to_f32(Bm[k * c.W + w]);
            sum += t;
            mag += std::fabs(t);
          }
          const double want = accumulate ? C0[r * ldc + w] + sum : mul * sum;
          const double scale = accumulate ? mag + std::fabs(C0[r * ldc + w]) : mul * mag;
          worst = std::max(worst, std::fabs(got - want) / (scale + 1e-30));
        }
      }
      EXPECT_LT(worst, 1e-5) << "largest error relative to the sum of magnitudes";
    }
  }
}

// C = A B and C' = B^T A^T (each operand in the other's role) hold the same numbers transposed, bit for
// bit: the bf16 attention's two backward schedules make some products in either orientation.
TEST(Amx, OperandRolesGiveTheSameBits) {
  if (!cpu::amx::available()) GTEST_SKIP() << "no AMX-BF16 here (CPU, build or OS permission)";
  const int64_t M = 64, N = 32, K = 64;
  const std::vector<uint16_t> X = random_bf16_bits(M * K, 7, 3.0f);  // [M, K]
  const std::vector<uint16_t> Y = random_bf16_bits(N * K, 8, 3.0f);  // [N, K]
  // C [M, N] = X Y^T: A = X, B = Y^T in VNNI; C' [N, M] = Y X^T: A = Y, B = X^T in VNNI.
  std::vector<uint16_t> Yt(K * N), Xt(K * M);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) Yt[k * N + n] = Y[n * K + k];
    for (int64_t m = 0; m < M; ++m) Xt[k * M + m] = X[m * K + k];
  }
  const std::vector<uint32_t> Bc = vnni(Yt, N, K, N, N), Bt = vnni(Xt, M, K, M, M);
  std::vector<float> C(M * N), Ct(N * M);
  {
    const cpu::amx::TileScope tiles(true);
    cpu::amx::tile_product(C.data(), N, X.data(), K, Bc.data(), N, M, K / 2, N, false, 1.0f);
    cpu::amx::tile_product(Ct.data(), M, Y.data(), K, Bt.data(), M, N, K / 2, M, false, 1.0f);
  }
  int differing = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) differing += std::memcmp(&C[m * N + n], &Ct[n * M + m], 4) != 0;
  EXPECT_EQ(differing, 0);
  EXPECT_NE(C[0], 0.0f);  // the products ran
}

TEST(Amx, SwitchTurnsTheKernelsUseOff) {
  const bool before = cpu::amx::set_enabled(false);
  EXPECT_FALSE(cpu::amx::enabled());
  cpu::amx::set_enabled(true);
  EXPECT_EQ(cpu::amx::enabled(), cpu::amx::available());
  cpu::amx::set_enabled(before);
}

TEST(Amx, TileProductRejectsShapesOffItsBlocking) {
  if (!cpu::amx::available()) GTEST_SKIP() << "no AMX-BF16 here (CPU, build or OS permission)";
  std::vector<float> C(64 * 64);
  std::vector<uint16_t> A(64 * 64);
  std::vector<uint32_t> B(32 * 64);
  EXPECT_THROW(cpu::amx::tile_product(C.data(), 64, A.data(), 64, B.data(), 64, 48, 32, 64, false, 1.0f), Error);
  EXPECT_THROW(cpu::amx::tile_product(C.data(), 64, A.data(), 64, B.data(), 64, 64, 24, 64, false, 1.0f), Error);
}
