// Grouped products over experts (kernels/cpu/grouped_gemm.h's contract) as one cuBLAS call each:
// cublasGemmGroupedBatchedEx (cuBLAS 12.5+) with one group per non-empty expert, each group its own
// sizes, so a single launch covers every expert's segment however uneven the loads.
//
// Row-major to cuBLAS's column-major as in gemm.cpp: our C = op(A) op(B) is cuBLAS's C^T = op(B)^T op(A)^T,
// so cuBLAS's A is our B and its B our A, m = our N, n = our M, each transposed exactly when ours is.
// fp32 with CUBLAS_COMPUTE_32F: exact fp32 products (no TF32), as gemm_f32.
//
// The per-group sizes, transposes and scalars are host arrays; the operand pointers go to the device as
// one array of 3 x groups pointers (A's, B's, C's), uploaded on the stream before the call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/grouped_gemm_args.h"
#include "kernels/cuda/ops.h"

namespace megadlm::cuda {

namespace {

void blas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLAS ", what, " failed with status ", static_cast<int>(st));
}

// One cuBLAS handle for the process; calls hold the mutex while they set its stream and launch.
struct BlasState {
  std::mutex mu;
  cublasHandle_t handle = nullptr;
};

BlasState& blas() {
  static BlasState s;
  return s;
}

int as_int(int64_t v, const char* who) {
  MEGADLM_CHECK(v >= 0 && v <= INT_MAX, who, ": size ", v, " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

// The problems of one grouped call, one group of one product each, in cuBLAS's column-major terms.
struct Problems {
  explicit Problems(const char* name) : who(name) {}
  const char* who;
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  std::vector<const void*> a, b;
  std::vector<void*> c;

  void add(bool trans_a, bool trans_b, int64_t m_, int64_t n_, int64_t k_, const float* A, int64_t lda_,
           const float* B, int64_t ldb_, float beta_, float* C, int64_t ldc_) {
    ta.push_back(trans_a ? CUBLAS_OP_T : CUBLAS_OP_N), tb.push_back(trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    m.push_back(as_int(m_, who)), n.push_back(as_int(n_, who)), k.push_back(as_int(k_, who));
    lda.push_back(as_int(lda_, who)), ldb.push_back(as_int(ldb_, who)), ldc.push_back(as_int(ldc_, who));
    size.push_back(1), alpha.push_back(1.0f), beta.push_back(beta_);
    a.push_back(A), b.push_back(B), c.push_back(C);
  }

  void run(cudaStream_t stream) const {
    const size_t groups = a.size();
    if (groups == 0) return;
    std::vector<const void*> host;
    host.insert(host.end(), a.begin(), a.end());
    host.insert(host.end(), b.begin(), b.end());
    host.insert(host.end(), c.begin(), c.end());
    const size_t bytes = host.size() * sizeof(void*);
    void** dev = static_cast<void**>(device_alloc_async(bytes, stream));
    // From pageable host memory: the copy has taken the data when it returns, so `host` may go.
    const cudaError_t err = cudaMemcpyAsync(dev, host.data(), bytes, cudaMemcpyHostToDevice, stream);
    if (err != cudaSuccess) {
      device_free_async(dev, stream);
      fail(who, ": uploading the operand pointers failed: ", cudaGetErrorString(err));
    }
    cublasStatus_t st;
    {
      BlasState& s = blas();
      std::lock_guard<std::mutex> lock(s.mu);
      if (!s.handle) blas_check(cublasCreate(&s.handle), "cublasCreate");
      blas_check(cublasSetStream(s.handle, stream), "cublasSetStream");
      st = cublasGemmGroupedBatchedEx(s.handle, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
                                      const_cast<const void* const*>(dev), CUDA_R_32F, lda.data(),
                                      const_cast<const void* const*>(dev + groups), CUDA_R_32F, ldb.data(),
                                      beta.data(), dev + 2 * groups, CUDA_R_32F, ldc.data(),
                                      static_cast<int>(groups), size.data(), CUBLAS_COMPUTE_32F);
    }
    device_free_async(dev, stream);
    if (st != CUBLAS_STATUS_SUCCESS) fail(who, ": cublasGemmGroupedBatchedEx failed with status ", static_cast<int>(st));
  }
};

}  // namespace

void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                          const float* const* W, float* Y, cudaStream_t stream) {
  Problems p{"cuda grouped_gemm_forward"};
  check_grouped_gemm_args(p.who, G, offsets, N, K);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    // Y_g [rows, N] = X_g [rows, K] @ W_g^T: cuBLAS's A = W_g (transposed), B = X_g.
    if (rows > 0) p.add(true, false, N, rows, K, W[g], K, X + r0 * K, K, 0.0f, Y + r0 * N, N);
  }
  p.run(stream);
}

void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                const float* const* W, float* dX, cudaStream_t stream) {
  Problems p{"cuda grouped_gemm_backward_data"};
  check_grouped_gemm_args(p.who, G, offsets, N, K);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    // dX_g [rows, K] = dY_g [rows, N] @ W_g [N, K]: cuBLAS's A = W_g, B = dY_g, neither transposed.
    if (rows > 0) p.add(false, false, K, rows, N, W[g], K, dY + r0 * N, N, 0.0f, dX + r0 * K, K);
  }
  p.run(stream);
}

void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* X, float* const* dW, cudaStream_t stream) {
  Problems p{"cuda grouped_gemm_backward_weight"};
  check_grouped_gemm_args(p.who, G, offsets, N, K);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
    // dW_g [N, K] += dY_g^T @ X_g: cuBLAS's A = X_g, B = dY_g (transposed), reduced over the rows.
    if (rows > 0) p.add(false, true, K, N, rows, X + r0 * K, K, dY + r0 * N, N, 1.0f, dW[g], K);
  }
  p.run(stream);
}

}  // namespace megadlm::cuda
