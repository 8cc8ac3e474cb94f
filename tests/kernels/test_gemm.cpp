// Matrix products against a naive double-precision reference: every transpose combination, awkward
// sizes, padded leading dimensions, alpha / beta, bf16 inputs, batches with strides and the degenerate
// sizes. Outputs are poisoned with NaN (beta = 0 must not read C) and the padding between rows holds a
// sentinel that must survive.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/gemm.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

constexpr float kSentinel = 12345.0f;  // padding value that must never change

// A stored matrix: rows x cols with row stride ld (ld - cols padding columns).
struct Stored {
  int64_t rows, cols, ld;
};
Stored stored_a(bool trans, int64_t M, int64_t K, int64_t pad) {
  return trans ? Stored{K, M, M + pad} : Stored{M, K, K + pad};
}
Stored stored_b(bool trans, int64_t K, int64_t N, int64_t pad) {
  return trans ? Stored{N, K, K + pad} : Stored{K, N, N + pad};
}

// op(X)[r,c] of a stored matrix.
template <typename T>
double op_at(const T* X, bool trans, int64_t ld, int64_t r, int64_t c) {
  return static_cast<double>(trans ? X[c * ld + r] : X[r * ld + c]);
}

// ref [M,N] = alpha * op(A) @ op(B) + beta * C0 (C0 ignored when beta == 0).
std::vector<double> reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const float* A,
                              int64_t lda, const float* B, int64_t ldb, double beta, const float* C0,
                              int64_t ldc) {
  std::vector<double> ref(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += op_at(A, ta, lda, i, k) * op_at(B, tb, ldb, k, j);
      ref[i * N + j] = alpha * s + (beta != 0.0 ? beta * static_cast<double>(C0[i * ldc + j]) : 0.0);
    }
  return ref;
}

// The M x N block of C (row stride ldc) as a tight vector.
std::vector<float> block(const std::vector<float>& C, int64_t M, int64_t N, int64_t ldc, int64_t offset = 0) {
  std::vector<float> out(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) out[i * N + j] = C[offset + i * ldc + j];
  return out;
}

// The padding columns of C [M, ldc] still hold the sentinel.
void expect_padding_intact(const std::vector<float>& C, int64_t M, int64_t N, int64_t ldc, int64_t offset = 0) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[offset + i * ldc + j], kSentinel) << "padding at " << i << "," << j;
}

// C [M, ldc] filled with `value` in the M x N block (random when value is 0 and random is set) and the
// sentinel in the padding.
std::vector<float> make_c(int64_t M, int64_t N, int64_t ldc, float value, uint64_t seed, bool random) {
  std::vector<float> C(std::max<int64_t>(1, M * ldc), kSentinel);
  const auto r = random_vector(M * N, seed);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = random ? r[i * N + j] : value;
  return C;
}

std::vector<float> make_stored(const Stored& s, uint64_t seed) {
  auto v = random_vector(std::max<int64_t>(1, s.rows * s.ld), seed);
  for (int64_t i = 0; i < s.rows; ++i)
    for (int64_t j = s.cols; j < s.ld; ++j) v[i * s.ld + j] = NAN;  // padding must never be read
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}

const int64_t kMs[] = {1, 7, 33};
const int64_t kNs[] = {1, 13, 65};
const int64_t kKs[] = {1, 17, 100};

}  // namespace

// fp32, every transpose and size combination, padded leading dimensions, with
// (alpha, beta) = (1.5, 0) on a NaN-poisoned C, (1, 1) accumulation and (-0.5, 0.25) scaling.
TEST(Gemm, F32AllTransposesAwkwardSizes) {
  struct AB { float alpha, beta; };
  const AB cases[] = {{1.5f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 0.25f}};
  uint64_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : kMs)
        for (int64_t N : kNs)
          for (int64_t K : kKs)
            for (const AB& ab : cases) {
              SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                              << " K=" << K << " alpha=" << ab.alpha << " beta=" << ab.beta);
              const Stored sa = stored_a(ta, M, K, 3), sb = stored_b(tb, K, N, 5);
              const int64_t ldc = N + 2;
              const auto A = make_stored(sa, ++seed), B = make_stored(sb, ++seed);
              auto C = make_c(M, N, ldc, NAN, ++seed, ab.beta != 0.0f);
              const auto C0 = C;
              cpu::gemm(ta, tb, M, N, K, ab.alpha, A.data(), sa.ld, B.data(), sb.ld, ab.beta, C.data(), ldc);
              const auto ref = reference(ta, tb, M, N, K, ab.alpha, A.data(), sa.ld, B.data(), sb.ld, ab.beta,
                                         C0.data(), ldc);
              EXPECT_LT(megadlm::test::max_rel_error(block(C, M, N, ldc), ref), 1e-5);
              expect_padding_intact(C, M, N, ldc);
            }
}

// A product large enough for oneDNN's blocked, threaded kernels (several cache blocks in every
// dimension), beta = 0 on NaN.
TEST(Gemm, F32LargerBlockedShapes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t M = 131, N = 257, K = 300;
      const Stored sa = stored_a(ta, M, K, 1), sb = stored_b(tb, K, N, 0);
      const auto A = make_stored(sa, 7), B = make_stored(sb, 8);
      auto C = make_c(M, N, N, NAN, 0, false);
      cpu::gemm(ta, tb, M, N, K, 1.0f, A.data(), sa.ld, B.data(), sb.ld, 0.0f, C.data(), N);
      const auto ref = reference(ta, tb, M, N, K, 1.0, A.data(), sa.ld, B.data(), sb.ld, 0.0, nullptr, N);
      EXPECT_LT(megadlm::test::max_rel_error(C, ref), 1e-5) << "ta=" << ta << " tb=" << tb;
    }
}

// bf16 inputs against a double reference on the bf16-rounded inputs: only fp32 accumulation error
// remains, which grows with K.
TEST(Gemm, Bf16AllTransposesAgainstRoundedReference) {
  struct AB { float alpha, beta; };
  const AB cases[] = {{1.0f, 0.0f}, {0.75f, 1.0f}, {2.0f, -1.5f}};
  uint64_t seed = 5000;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : kMs)
        for (int64_t N : kNs)
          for (int64_t K : kKs)
            for (const AB& ab : cases) {
              SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                              << " K=" << K << " alpha=" << ab.alpha << " beta=" << ab.beta);
              const Stored sa = stored_a(ta, M, K, 2), sb = stored_b(tb, K, N, 3);
              const int64_t ldc = N + 1;
              const auto A16 = to_bf16(make_stored(sa, ++seed)), B16 = to_bf16(make_stored(sb, ++seed));
              const auto A = from_bf16(A16), B = from_bf16(B16);
              auto C = make_c(M, N, ldc, NAN, ++seed, ab.beta != 0.0f);
              const auto C0 = C;
              cpu::gemm_bf16(ta, tb, M, N, K, ab.alpha, A16.data(), sa.ld, B16.data(), sb.ld, ab.beta, C.data(),
                             ldc);
              const auto ref = reference(ta, tb, M, N, K, ab.alpha, A.data(), sa.ld, B.data(), sb.ld, ab.beta,
                                         C0.data(), ldc);
              EXPECT_LT(megadlm::test::max_rel_error(block(C, M, N, ldc), ref), 2e-7 * K + 1e-6);
              expect_padding_intact(C, M, N, ldc);
            }
}

TEST(Gemm, Bf16LargerShape) {
  const int64_t M = 200, N = 96, K = 768;
  const auto A16 = to_bf16(random_vector(M * K, 1)), B16 = to_bf16(random_vector(N * K, 2));
  const auto A = from_bf16(A16), B = from_bf16(B16);
  auto C = make_c(M, N, N, NAN, 0, false);
  cpu::gemm_bf16(false, true, M, N, K, 1.0f, A16.data(), K, B16.data(), K, 0.0f, C.data(), N);
  const auto ref = reference(false, true, M, N, K, 1.0, A.data(), K, B.data(), K, 0.0, nullptr, N);
  EXPECT_LT(megadlm::test::max_rel_error(C, ref), 2e-7 * K + 1e-6);
}

// The bf16-output product (the output layer's logits under --bf16) is the fp32-output product rounded to
// bf16, bit for bit, for every transpose, with alpha, a padded ldc (the padding untouched), K = 0 and
// more rows than one slab; so is the product through fp32 column slabs (whole and partial slabs).
TEST(Gemm, Bf16ToBf16IsTheFp32ResultRounded) {
  uint64_t seed = 7000;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const int64_t K : {int64_t{0}, int64_t{5}, int64_t{384}})
        for (const int64_t M : {int64_t{37}, int64_t{517}}) {  // 517: two slabs of 256 rows and a tail
        const int64_t N = 70, ldc = N + 3;
        SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb << " K=" << K << " M=" << M);
        const Stored sa = stored_a(ta, M, K, 2), sb = stored_b(tb, K, N, 3);
        const auto A16 = to_bf16(make_stored(sa, ++seed)), B16 = to_bf16(make_stored(sb, ++seed));
        std::vector<float> C32(M * N, NAN);
        cpu::gemm_bf16(ta, tb, M, N, K, 0.5f, A16.data(), sa.ld, B16.data(), sb.ld, 0.0f, C32.data(), N);
        for (const int64_t slab : {int64_t{0}, int64_t{16}, int64_t{64}}) {  // 0: the direct product
          std::vector<uint16_t> C16(M * ldc, 0x7FC0);  // bf16 NaN, also in the padding
          std::vector<float> scratch(M * std::max<int64_t>(slab, 1), NAN);
          if (slab == 0)
            cpu::gemm_bf16_to_bf16(ta, tb, M, N, K, 0.5f, A16.data(), sa.ld, B16.data(), sb.ld, C16.data(), ldc);
          else
            cpu::gemm_bf16_to_bf16(ta, tb, M, N, K, 0.5f, A16.data(), sa.ld, B16.data(), sb.ld, C16.data(), ldc,
                                   scratch.data(), slab);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const uint16_t want = j < N ? f32_to_bf16(C32[i * N + j]) : uint16_t{0x7FC0};
              ASSERT_EQ(C16[i * ldc + j], want) << "slab " << slab << ", row " << i << ", column " << j;
            }
        }
      }
}

// Results below fp32's normal range: the slab form rounds them exactly, or, where the CPU converts with
// AVX512-BF16, makes them zero (that instruction flushes denormals, as the bf16 products' inputs do).
TEST(Gemm, Bf16ToBf16SlabsFlushOrRoundDenormalResults) {
  const int64_t M = 21, N = 40, K = 16;
  const auto A16 = to_bf16(random_vector(M * K, 7101)), B16 = to_bf16(random_vector(K * N, 7102));
  const float alpha = 1e-40f;  // every result a denormal (or zero)
  std::vector<float> C32(M * N, NAN), scratch(M * 16, NAN);
  std::vector<uint16_t> C16(M * N, 0x7FC0);
  cpu::gemm_bf16(false, false, M, N, K, alpha, A16.data(), K, B16.data(), N, 0.0f, C32.data(), N);
  cpu::gemm_bf16_to_bf16(false, false, M, N, K, alpha, A16.data(), K, B16.data(), N, C16.data(), N, scratch.data(),
                         16);
  int denormals = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    denormals += C32[i] != 0.0f && std::fabs(C32[i]) < 1.17549435e-38f;
    const uint16_t exact = f32_to_bf16(C32[i]);
    ASSERT_TRUE(C16[i] == exact || (C16[i] & 0x7FFF) == 0) << "element " << i << ": " << C16[i] << " vs " << exact;
  }
  EXPECT_GT(denormals, M * N / 2) << "the case must exercise denormal results";
}

// Repeated calls at one shape reuse the cached primitive (the cache does not grow) and give bitwise
// identical results; alpha is a run-time argument, so a new alpha reuses the primitive and is applied.
TEST(Gemm, PrimitiveCacheIsReusedAndExact) {
  const int64_t M = 19, N = 23, K = 41;
  const auto A16 = to_bf16(random_vector(M * K, 11)), B16 = to_bf16(random_vector(K * N, 12));
  const auto A = from_bf16(A16), B = from_bf16(B16);
  std::vector<float> C1(M * N, NAN), C2(M * N, NAN), C3(M * N, NAN), C4(M * N, NAN);
  cpu::gemm_bf16(false, false, M, N, K, 0.5f, A16.data(), K, B16.data(), N, 0.0f, C1.data(), N);
  const int64_t size_after_first = cpu::gemm_cache_size();
  cpu::gemm_bf16(false, false, M, N, K, 0.5f, A16.data(), K, B16.data(), N, 0.0f, C2.data(), N);
  cpu::gemm_bf16(false, false, M, N, K, -3.0f, A16.data(), K, B16.data(), N, 0.0f, C3.data(), N);
  cpu::gemm_bf16(false, false, M, N, K, 0.5f, A16.data(), K, B16.data(), N, 0.0f, C4.data(), N);
  EXPECT_EQ(cpu::gemm_cache_size(), size_after_first);
  EXPECT_EQ(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(C1.data(), C4.data(), C1.size() * sizeof(float)), 0);
  const auto ref = reference(false, false, M, N, K, -3.0, A.data(), K, B.data(), N, 0.0, nullptr, N);
  EXPECT_LT(megadlm::test::max_rel_error(C3, ref), 2e-7 * K + 1e-6);
  const auto ref_half = reference(false, false, M, N, K, 0.5, A.data(), K, B.data(), N, 0.0, nullptr, N);
  EXPECT_LT(megadlm::test::max_rel_error(C1, ref_half), 2e-7 * K + 1e-6);

  // The same holds for batched fp32 products.
  const int64_t batch = 3;
  const auto Ab = random_vector(batch * M * K, 13), Bb = random_vector(batch * K * N, 14);
  std::vector<float> D1(batch * M * N, NAN), D2(batch * M * N, NAN);
  cpu::gemm_batched(false, false, batch, M, N, K, 1.0f, Ab.data(), K, M * K, Bb.data(), N, K * N, 0.0f, D1.data(),
                    N, M * N);
  const int64_t size_after_batched = cpu::gemm_cache_size();
  cpu::gemm_batched(false, false, batch, M, N, K, 1.0f, Ab.data(), K, M * K, Bb.data(), N, K * N, 0.0f, D2.data(),
                    N, M * N);
  EXPECT_EQ(cpu::gemm_cache_size(), size_after_batched);
  EXPECT_EQ(std::memcmp(D1.data(), D2.data(), D1.size() * sizeof(float)), 0);
}

// Batched products with padded batch strides, every transpose, broadcast inputs (stride 0), and
// outputs interleaved within rows as heads are in a [T, H, D] layout.
TEST(Gemm, BatchedWithStrides) {
  struct AB { float alpha, beta; };
  const AB cases[] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {1.0f, 2.0f}};
  const int64_t batch = 5, M = 7, N = 13, K = 17;
  uint64_t seed = 9000;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int broadcast = 0; broadcast < 3; ++broadcast)  // 0 none, 1 A shared, 2 B shared
        for (const AB& ab : cases) {
          SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb << " broadcast=" << broadcast
                                          << " alpha=" << ab.alpha << " beta=" << ab.beta);
          const Stored sa = stored_a(ta, M, K, 2), sb = stored_b(tb, K, N, 1);
          const int64_t ldc = N + 3;
          const int64_t stride_a = broadcast == 1 ? 0 : sa.rows * sa.ld + 5;
          const int64_t stride_b = broadcast == 2 ? 0 : sb.rows * sb.ld + 3;
          const int64_t stride_c = M * ldc + 4;
          auto A = random_vector(std::max<int64_t>(stride_a, sa.rows * sa.ld) * batch, ++seed);
          auto B = random_vector(std::max<int64_t>(stride_b, sb.rows * sb.ld) * batch, ++seed);
          std::vector<float> C(stride_c * batch, kSentinel);
          const auto Cr = random_vector(stride_c * batch, ++seed);
          for (int64_t b = 0; b < batch; ++b)
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j)
                C[b * stride_c + i * ldc + j] = ab.beta == 0.0f ? NAN : Cr[b * stride_c + i * ldc + j];
          const auto C0 = C;
          cpu::gemm_batched(ta, tb, batch, M, N, K, ab.alpha, A.data(), sa.ld, stride_a, B.data(), sb.ld, stride_b,
                            ab.beta, C.data(), ldc, stride_c);
          for (int64_t b = 0; b < batch; ++b) {
            const auto ref = reference(ta, tb, M, N, K, ab.alpha, A.data() + b * stride_a, sa.ld,
                                       B.data() + b * stride_b, sb.ld, ab.beta, C0.data() + b * stride_c, ldc);
            EXPECT_LT(megadlm::test::max_rel_error(block(C, M, N, ldc, b * stride_c), ref), 1e-5) << "batch " << b;
            expect_padding_intact(C, M, N, ldc, b * stride_c);
            for (int64_t j = M * ldc; j < stride_c; ++j) ASSERT_EQ(C[b * stride_c + j], kSentinel);
          }
        }

  // Heads interleaved in rows: C [M, H*N] with head h at column h*N (stride_c = N, ldc = H*N).
  const int64_t H = 4;
  const auto A = random_vector(H * M * K, 1), B = random_vector(H * K * N, 2);
  std::vector<float> C(M * H * N, NAN);
  cpu::gemm_batched(false, false, H, M, N, K, 1.0f, A.data(), K, M * K, B.data(), N, K * N, 0.0f, C.data(), H * N, N);
  for (int64_t h = 0; h < H; ++h) {
    const auto ref = reference(false, false, M, N, K, 1.0, A.data() + h * M * K, K, B.data() + h * K * N, N, 0.0,
                               nullptr, H * N);
    EXPECT_LT(megadlm::test::max_rel_error(block(C, M, N, H * N, h * N), ref), 1e-5) << "head " << h;
  }
}

// M, N or K == 0: nothing touched, or C = beta * C (beta == 0 clears NaN). alpha == 0 is the same.
TEST(Gemm, DegenerateSizes) {
  const float a = 1.0f, b = 1.0f;
  std::vector<float> C = {NAN, NAN, kSentinel, NAN, NAN, kSentinel};  // 2x2 block, ldc 3
  cpu::gemm(false, false, 0, 2, 4, 1.0f, &a, 4, &b, 2, 0.0f, C.data(), 3);  // M == 0
  cpu::gemm(false, false, 2, 0, 4, 1.0f, &a, 4, &b, 1, 0.0f, C.data(), 3);  // N == 0
  EXPECT_TRUE(std::isnan(C[0]) && std::isnan(C[4]));
  cpu::gemm(false, false, 2, 2, 0, 1.0f, &a, 1, &b, 2, 0.0f, C.data(), 3);  // K == 0, beta == 0
  EXPECT_EQ(C, (std::vector<float>{0, 0, kSentinel, 0, 0, kSentinel}));

  std::vector<float> D = {1, 2, kSentinel, 3, 4, kSentinel};
  cpu::gemm(false, false, 2, 2, 0, 1.0f, &a, 1, &b, 2, 2.0f, D.data(), 3);  // K == 0: C = 2 C
  EXPECT_EQ(D, (std::vector<float>{2, 4, kSentinel, 6, 8, kSentinel}));
  const uint16_t a16 = 0, b16 = 0;
  cpu::gemm_bf16(false, false, 2, 2, 0, 1.0f, &a16, 1, &b16, 2, 1.0f, D.data(), 3);  // K == 0, beta 1: unchanged
  EXPECT_EQ(D, (std::vector<float>{2, 4, kSentinel, 6, 8, kSentinel}));
  cpu::gemm_batched(false, false, 2, 1, 2, 0, 1.0f, &a, 1, 0, &b, 2, 0, -1.0f, D.data(), 3, 3);
  EXPECT_EQ(D, (std::vector<float>{-2, -4, kSentinel, -6, -8, kSentinel}));
  cpu::gemm_batched(false, false, 0, 2, 2, 2, 1.0f, &a, 2, 0, &b, 2, 0, 0.0f, D.data(), 3, 6);  // batch 0
  EXPECT_EQ(D[0], -2.0f);

  // alpha == 0: C = beta * C without reading A or B (here NaN).
  const std::vector<float> An(4, NAN), Bn(4, NAN);
  std::vector<float> E = {1, 2, 3, 4};
  cpu::gemm(false, false, 2, 2, 2, 0.0f, An.data(), 2, Bn.data(), 2, 0.5f, E.data(), 2);
  EXPECT_EQ(E, (std::vector<float>{0.5f, 1, 1.5f, 2}));
}

TEST(Gemm, RejectsBadLeadingDimensions) {
  std::vector<float> A(64), B(64), C(64);
  EXPECT_THROW(cpu::gemm(false, false, 4, 4, 5, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4), Error);  // lda < K
  EXPECT_THROW(cpu::gemm(true, false, 5, 4, 3, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4), Error);   // lda < M
  EXPECT_THROW(cpu::gemm(false, true, 4, 4, 5, 1.0f, A.data(), 5, B.data(), 4, 0.0f, C.data(), 4), Error);   // ldb < K
  EXPECT_THROW(cpu::gemm(false, false, 4, 5, 4, 1.0f, A.data(), 4, B.data(), 5, 0.0f, C.data(), 4), Error);  // ldc < N
  EXPECT_THROW(cpu::gemm(false, false, -1, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4), Error);
  EXPECT_THROW(cpu::gemm_batched(false, false, 2, 4, 4, 4, 1.0f, A.data(), 4, 16, B.data(), 4, 16, 0.0f, C.data(), 4,
                                 8),
               Error);  // the two 4x4 outputs overlap
}
