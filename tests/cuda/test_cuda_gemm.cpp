// cuBLASLt products (kernels/cuda/gemm.cpp) against a double-precision reference on the same inputs:
// fp32 (exact products and TF32), bf16 with fp32 and bf16 outputs, the bias / GELU / DGELU epilogues,
// strided batches, and fp8 (e4m3 / e5m2 with scales) on sm_89+; the backend's fp8 products (with their
// fallback) and byte transpose.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "cuda/cuda_test_util.h"

#ifndef MEGADLM_HAVE_CUDA
MEGADLM_CUDA_NOT_BUILT_TEST(CudaGemm)
#else
#include "kernels/backend.h"

namespace megadlm::test {
namespace {

class CudaGemm : public CudaTest {};

// Row-major reference: C = alpha op(A) op(B) + beta C0.
std::vector<double> ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const std::vector<float>& A,
                             int64_t lda, const std::vector<float>& B, int64_t ldb, double beta,
                             const std::vector<float>& C0, int64_t ldc) {
  std::vector<double> C(M * ldc, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
      C[m * ldc + n] = alpha * s + (beta != 0 ? beta * C0[m * ldc + n] : 0.0);
    }
  return C;
}

double gelu_d(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_grad_d(double x) {
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

TEST_F(CudaGemm, F32AllTransposesWithBeta) {
  const int64_t M = 67, N = 45, K = 93;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
      const auto A = rand((ta ? K : M) * lda), B = rand((tb ? N : K) * ldb), C0 = rand(M * ldc);
      auto dA = to_device(A), dB = to_device(B), dC = to_device(C0);
      cuda::gemm_f32(ta, tb, M, N, K, 0.7f, dA.get(), lda, dB.get(), ldb, 0.5f, dC.get(), ldc);
      const auto ref = ref_gemm(ta, tb, M, N, K, 0.7, A, lda, B, ldb, 0.5, C0, ldc);
      const auto got = to_host(dC);
      double err = 0, scale = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          err = std::fmax(err, std::fabs(got[m * ldc + n] - ref[m * ldc + n]));
          scale = std::fmax(scale, std::fabs(ref[m * ldc + n]));
        }
      EXPECT_LT(err / scale, 1e-5) << "ta=" << ta << " tb=" << tb;
      // Padding columns between rows of C are untouched.
      EXPECT_EQ(got[ldc - 1], C0[ldc - 1]);
    }
}

TEST_F(CudaGemm, Tf32AndBatched) {
  const int64_t batch = 3, M = 40, N = 24, K = 56;
  const auto A = rand(batch * M * K), B = rand(batch * K * N);
  auto dA = to_device(A), dB = to_device(B);
  auto dC = poisoned(batch * M * N);
  cuda::gemm_batched(false, false, batch, M, N, K, 1.0f, dA.get(), K, M * K, dB.get(), N, K * N, 0.0f, dC.get(), N,
                     M * N);
  const auto got = to_host(dC);
  for (int64_t i = 0; i < batch; ++i) {
    const std::vector<float> Ai(A.begin() + i * M * K, A.begin() + (i + 1) * M * K);
    const std::vector<float> Bi(B.begin() + i * K * N, B.begin() + (i + 1) * K * N);
    const auto ref = ref_gemm(false, false, M, N, K, 1.0, Ai, K, Bi, N, 0.0, {}, N);
    EXPECT_LT(max_rel_error(got.data() + i * M * N, ref.data(), M * N), 1e-5) << "batch " << i;
  }
  // TF32: 10-bit mantissa products, fp32 accumulation.
  cuda::GemmArgs g;
  g.M = M, g.N = N, g.K = K, g.A = dA.get(), g.lda = K, g.B = dB.get(), g.ldb = N, g.C = dC.get(), g.ldc = N, g.tf32 = true;
  cuda::gemm(g);
  const auto ref0 = ref_gemm(false, false, M, N, K, 1.0, A, K, B, N, 0.0, {}, N);
  EXPECT_LT(max_rel_error(to_host(dC).data(), ref0.data(), M * N), 5e-3);
}

TEST_F(CudaGemm, Bf16ToF32AndBf16WithEpilogues) {
  const int64_t M = 64, N = 96, K = 136;  // cuBLASLt's bf16 kernels want 16-byte aligned leading dims
  const auto A = bf16_round(rand(M * K)), W = bf16_round(rand(N * K)), bias = bf16_round(rand(N));
  auto dA = to_device(to_bf16(A)), dW = to_device(to_bf16(W)), dbias = to_device(to_bf16(bias));
  // y = A W^T (a Linear layer), fp32 out.
  auto dC = poisoned(M * N);
  cuda::gemm_bf16(false, true, M, N, K, 1.0f, dA.get(), K, dW.get(), K, 0.0f, dC.get(), N);
  const auto ref = ref_gemm(false, true, M, N, K, 1.0, A, K, W, K, 0.0, {}, N);
  EXPECT_LT(max_rel_error(to_host(dC).data(), ref.data(), M * N), 1e-5);
  // bf16 out with bias + GELU, saving the pre-activation.
  auto dY = poisoned_bf16(M * N), dAux = poisoned_bf16(M * N);
  cuda::GemmArgs g;
  g.trans_b = true, g.M = M, g.N = N, g.K = K, g.a_type = g.b_type = g.c_type = DType::BF16;
  g.A = dA.get(), g.lda = K, g.B = dW.get(), g.ldb = K, g.C = dY.get(), g.ldc = N;
  g.epilogue = cuda::Epilogue::BiasGelu, g.bias = dbias.get(), g.aux = dAux.get();
  cuda::gemm(g);
  std::vector<double> pre(M * N), act(M * N);
  for (int64_t i = 0; i < M * N; ++i) {
    pre[i] = ref[i] + bias[i % N];
    act[i] = gelu_d(pre[i]);
  }
  EXPECT_LT(max_rel_error(from_bf16(to_host(dY)).data(), act.data(), M * N), kTolBF16);
  EXPECT_LT(max_rel_error(from_bf16(to_host(dAux)).data(), pre.data(), M * N), kTolBF16);
  // DGELU: dX = (dY W) * gelu'(aux), with dY [M, N'] against W [N', K]: here the product G = A2 B2.
  const int64_t N2 = 48, K2 = 64;
  const auto G = bf16_round(rand(M * K2)), B2 = bf16_round(rand(K2 * N2)), aux = bf16_round(rand(M * N2, -3.0f, 3.0f));
  auto dG = to_device(to_bf16(G)), dB2 = to_device(to_bf16(B2)), daux = to_device(to_bf16(aux));
  auto dX = poisoned_bf16(M * N2);
  cuda::GemmArgs d;
  d.M = M, d.N = N2, d.K = K2, d.a_type = d.b_type = d.c_type = DType::BF16;
  d.A = dG.get(), d.lda = K2, d.B = dB2.get(), d.ldb = N2, d.C = dX.get(), d.ldc = N2;
  d.epilogue = cuda::Epilogue::DGelu, d.aux = daux.get();
  cuda::gemm(d);
  auto refd = ref_gemm(false, false, M, N2, K2, 1.0, G, K2, B2, N2, 0.0, {}, N2);
  for (int64_t i = 0; i < M * N2; ++i) refd[i] *= gelu_grad_d(aux[i]);
  EXPECT_LT(max_rel_error(from_bf16(to_host(dX)).data(), refd.data(), M * N2), 2 * kTolBF16);
}

// Out of place: D = A W^T + C in bf16 (a projection added to the residual stream), C left as it was.
TEST_F(CudaGemm, OutOfPlaceAddsC) {
  const int64_t M = 96, N = 64, K = 128;
  const auto A = bf16_round(rand(M * K)), W = bf16_round(rand(N * K)), R = bf16_round(rand(M * N));
  auto dA = to_device(to_bf16(A)), dW = to_device(to_bf16(W)), dR = to_device(to_bf16(R));
  auto dD = poisoned_bf16(M * N);
  cuda::GemmArgs g;
  g.trans_b = true, g.M = M, g.N = N, g.K = K, g.beta = 1.0f, g.a_type = g.b_type = g.c_type = DType::BF16;
  g.A = dA.get(), g.lda = K, g.B = dW.get(), g.ldb = K, g.C = dR.get(), g.ldc = N, g.D = dD.get();
  cuda::gemm(g);
  const auto ref = ref_gemm(false, true, M, N, K, 1.0, A, K, W, K, 1.0, R, N);
  EXPECT_LT(max_rel_error(from_bf16(to_host(dD)).data(), ref.data(), M * N), kTolBF16);
  EXPECT_EQ(from_bf16(to_host(dR)), R) << "C was written";
  g.D = g.C;
  EXPECT_THROW(cuda::gemm(g), Error);  // D aliasing C is refused
}

TEST_F(CudaGemm, Fp8WithScales) {
  if (cuda::compute_capability() < 89) GTEST_SKIP() << "fp8 products need sm_89+, this GPU is sm_" << cuda::compute_capability();
  // Scales in buffers of their own (16-byte aligned): with both in one buffer (the second 4 bytes in)
  // cuBLASLt can refuse every algorithm (status 15, NOT_SUPPORTED), e.g. for 64 x 80 x 128.
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{64, 80, 128}, {256, 192, 256}})
  for (DType bt : {DType::F8E4M3, DType::F8E5M2}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
    const auto A = rand(M * K, -2.0f, 2.0f), W = rand(N * K, -2.0f, 2.0f);
    auto dA32 = to_device(A), dW32 = to_device(W);
    cuda::DeviceBuffer<uint8_t> qa(M * K), qw(N * K);
    const float sa = 64.0f, sw = bt == DType::F8E4M3 ? 100.0f : 1000.0f;  // quantisation scales
    cuda::cast_f32_to_e4m3(qa.get(), dA32.get(), M * K, sa);
    if (bt == DType::F8E4M3) cuda::cast_f32_to_e4m3(qw.get(), dW32.get(), N * K, sw);
    else cuda::cast_f32_to_e5m2(qw.get(), dW32.get(), N * K, sw);
    // The reference multiplies exactly the dequantised values.
    auto deq_a = poisoned(M * K), deq_w = poisoned(N * K);
    cuda::cast_e4m3_to_f32(deq_a.get(), qa.get(), M * K, 1.0f / sa);
    if (bt == DType::F8E4M3) cuda::cast_e4m3_to_f32(deq_w.get(), qw.get(), N * K, 1.0f / sw);
    else cuda::cast_e5m2_to_f32(deq_w.get(), qw.get(), N * K, 1.0f / sw);
    const auto ref = ref_gemm(false, true, M, N, K, 1.0, to_host(deq_a), K, to_host(deq_w), K, 0.0, {}, N);
    auto inv_a = to_device(std::vector<float>{1.0f / sa}), inv_w = to_device(std::vector<float>{1.0f / sw});
    auto dY = poisoned_bf16(M * N);
    cuda::GemmArgs g;
    g.trans_b = true, g.M = M, g.N = N, g.K = K, g.a_type = DType::F8E4M3, g.b_type = bt, g.c_type = DType::BF16;
    g.A = qa.get(), g.lda = K, g.B = qw.get(), g.ldb = K, g.C = dY.get(), g.ldc = N;
    g.a_scale = inv_a.get(), g.b_scale = inv_w.get();
    const std::string err = test::error_of([&] { cuda::gemm(g); });
    if (!err.empty()) {  // go on to the other shapes and types: which of them cuBLASLt takes is the finding
      ADD_FAILURE() << err;
      continue;
    }
    EXPECT_LT(max_rel_error(from_bf16(to_host(dY)).data(), ref.data(), M * N), kTolBF16) << dtype_name(bt);
  }
}

// Backend::gemm_fp8 (the Linear layers' fp8 products) against the double reference on the dequantised
// codes: a shape cuBLASLt's fp8 kernels take (multiples of 16) and one they do not (the dequantised
// fallback), E4M3 x E4M3 and E5M2 x E4M3, beta 0 over NaN and beta 1; Backend::transpose_u8 bit for bit.
TEST_F(CudaGemm, BackendFp8ProductsMatchTheReference) {
  const Backend& gpu = backend_for(Device::CUDA);
  if (cuda::compute_capability() >= 89) {
    EXPECT_TRUE(gpu.fp8_products());
  }
  auto decode = [](uint8_t c, bool e5m2) { return e5m2 ? e5m2_to_f32(c) : e4m3_to_f32(c); };
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{64, 80, 128}, {30, 50, 70}})
    for (bool a_e5m2 : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K << " A "
                                          << (a_e5m2 ? "e5m2" : "e4m3") << " beta " << beta);
        const auto a32 = rand(M * K, -3.0f, 3.0f), b32 = rand(N * K, -3.0f, 3.0f), c0 = rand(M * N);
        auto dA32 = to_device(a32), dB32 = to_device(b32);
        cuda::DeviceBuffer<uint8_t> dA(M * K), dB(N * K);
        gpu.cast_f32_to_fp8(dA.get(), dA32.get(), M * K, 40.0f, a_e5m2);
        gpu.cast_f32_to_fp8(dB.get(), dB32.get(), N * K, 100.0f, false);
        const auto A = to_host(dA), B = to_host(dB);
        std::vector<float> a(M * K), b(N * K);
        for (int64_t i = 0; i < M * K; ++i) a[i] = decode(A[i], a_e5m2) / 40.0f;
        for (int64_t i = 0; i < N * K; ++i) b[i] = decode(B[i], false) / 100.0f;
        const auto ref = ref_gemm(false, true, M, N, K, 1.0, a, K, b, K, beta, c0, N);
        auto dC = beta == 0.0f ? poisoned(M * N) : to_device(c0);
        gpu.gemm_fp8(M, N, K, dA.get(), a_e5m2, 1.0f / 40, dB.get(), false, 1.0f / 100, beta, dC.get());
        EXPECT_LT(max_rel_error(to_host(dC).data(), ref.data(), M * N), kTolF32);
      }
  for (auto [R, C] : {std::pair<int64_t, int64_t>{70, 131}, {1024, 96}}) {
    std::vector<uint8_t> in(R * C), want(R * C);
    for (int64_t i = 0; i < R * C; ++i) in[i] = static_cast<uint8_t>((i * 2654435761u) >> 11);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) want[c * R + r] = in[r * C + c];
    auto d_in = to_device(in), d_out = to_device(std::vector<uint8_t>(R * C, 0xAB));
    gpu.transpose_u8(d_out.get(), d_in.get(), R, C);
    EXPECT_EQ(to_host(d_out), want) << R << " x " << C;
  }
}

TEST_F(CudaGemm, RejectsBadArguments) {
  cuda::GemmArgs g;
  g.M = 4, g.N = 4, g.K = 4, g.lda = 2, g.ldb = 4, g.ldc = 4;
  EXPECT_THROW(cuda::gemm(g), Error);  // lda < K
  g.lda = 4, g.a_type = DType::F8E4M3, g.b_type = DType::F8E4M3, g.c_type = DType::BF16;
  EXPECT_THROW(cuda::gemm(g), Error);  // fp8 without trans_b
}

}  // namespace
}  // namespace megadlm::test

#endif  // MEGADLM_HAVE_CUDA
