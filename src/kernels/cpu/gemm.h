#pragma once
// Matrix products through oneDNN. Row-major throughout, as in numpy / PyTorch.
//
//   C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C[M,N]
//
// op(X) is X when trans_x is false and X^T when true; so A is stored [M,K] (lda >= K) or, transposed,
// [K,M] (lda >= M); B is stored [K,N] (ldb >= N) or, transposed, [N,K] (ldb >= K). beta = 1 accumulates
// into C (gradient sums); beta = 0 overwrites C without reading it (C may hold NaN).
#include <cstdint>

namespace megadlm::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// bf16 inputs (raw bf16 bits), fp32 accumulation and fp32 output.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// bf16 inputs, fp32 accumulation, the result rounded to bf16: C [M,N] = bf16(alpha * op(A) @ op(B)) (no
// beta: C is overwritten without being read). The output layer's logits under --bf16 take the slab
// form below.
void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc);
// The same bits through fp32 column slabs: each slab of `slab` columns is made by the fp32-output
// product in scratch [M, slab] (the caller's memory, M * slab floats) and rounded into C, fp32 denormal
// results to zero where the CPU has AVX512-BF16 (its conversion instruction: kernels/cpu/cast.h). For a wide N
// (the vocabulary) without AMX this is the faster way: oneDNN's fp32-output product on slabs outruns its
// bf16-output product on the whole width, and rounding a slab that is still in cache costs far less.
// Where oneDNN multiplies bf16 on AMX (bf16_matmul_on_amx) the bf16-output product is the faster one, and
// this form runs it, without the slabs (docs/bench/decisions.md has the rates).
void gemm_bf16_to_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc,
                       float* scratch, int64_t slab);

// `batch` independent products; matrix i of A starts at A + i * stride_a (likewise B, C).
void gemm_batched(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                  float beta, float* C, int64_t ldc, int64_t stride_c);

// Whether oneDNN has a bf16 matmul on this CPU (AVX512 with or without BF16, or AMX): probed once. Where
// it has none (AVX2 only), gemm_bf16 widens its inputs and runs the fp32 product, which
// is slower than multiplying the fp32 values directly; --bf16 then keeps fp32 products
// (train/precision_arguments.cpp).
bool has_bf16_matmul();

// Whether oneDNN's bf16 matmul runs on AMX tiles here (its implementation for a probe shape says so).
bool bf16_matmul_on_amx();

// Number of oneDNN matmul primitives held in the cache (bf16 and batched products keep one per shape,
// strides, alpha == 1 or not and beta == 0 or not; alpha's value is passed at run time). For tests.
int64_t gemm_cache_size();

}  // namespace megadlm::cpu
