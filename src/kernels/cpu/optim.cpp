// Optimizer kernels over flat fp32 buffers: AdamW and the reductions that gradient clipping and loss
// scaling need. Each is one pass over memory.
#include "kernels/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/vec16.h"

namespace megadlm::cpu {

namespace {

// Below this many elements, starting threads costs more than the pass.
constexpr int64_t kParallelMin = 1 << 15;
// sum_squares adds within chunks of this many elements, then adds the chunk sums in index order. The
// chunking depends only on n, never on the thread count, which is what makes the result reproducible.
constexpr int64_t kChunk = 4096;

}  // namespace

// ---- AdamW -------------------------------------------------------------------------------------------------
// torch.optim.AdamW's update, with decoupled weight decay:
//   m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g^2
//   p = p - lr * wd * p - lr * mhat / (sqrt(vhat) + eps),  mhat = m / (1 - beta1^t), vhat = v / (1 - beta2^t)
// computed, as torch does, with the bias corrections folded into a step size and a denominator scale:
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).

namespace {

struct AdamWConstants {
  float b1, b2, one_b1, one_b2, eps, grad_scale, step_size, inv_sqrt_bc2, decay;
};

// The update of param, m, v [i0, i1); with kZero grad = 0 once read. A template rather than a run-time
// test inside the loop, which would keep it from vectorising.
template <bool kZero>
inline void adamw_span(float* param, float* grad, float* m, float* v, int64_t i0, int64_t i1,
                       const AdamWConstants& c) {
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) {
    const float g = grad[i] * c.grad_scale;
    if constexpr (kZero) grad[i] = 0.0f;
    const float mi = c.b1 * m[i] + c.one_b1 * g;
    const float vi = c.b2 * v[i] + c.one_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * c.decay - c.step_size * mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps);
  }
}

// out [n] = bf16(x [n]), bit for bit as f32_to_bf16, with streaming stores where out is aligned for
// them: the copy is written whole and read only by the next step's products, so fetching its old
// lines first (what a plain store does) would double its traffic.
inline void copy_bf16_streaming(uint16_t* out, const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i < n && reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i) out[i] = f32_to_bf16(x[i]);
  for (; i + 16 <= n; i += 16)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)vec::round_bf16(vec::load16(x + i)));
#endif
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

// Elements per block of the update: with a bf16 copy, the block's params are still in L1 when copied.
constexpr int64_t kCopyBlock = 2048;

// The update of param, m, v [n]; with kCopy also param_bf16 [n] = the updated param in bf16, with
// kZero grad [n] = 0 once read. Each element's arithmetic is the same either way.
template <bool kCopy, bool kZero>
void adamw_loop(float* param, float* grad, float* m, float* v, uint16_t* param_bf16, int64_t n,
                const AdamWConstants c) {
#pragma omp parallel if (n > kParallelMin)
  {
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; b += kCopyBlock) {
      const int64_t e = std::min(n, b + kCopyBlock);
      adamw_span<kZero>(param, grad, m, v, b, e, c);
      if constexpr (kCopy) copy_bf16_streaming(param_bf16 + b, param + b, e - b);
    }
#if defined(__AVX512F__)
    if constexpr (kCopy) _mm_sfence();  // streaming stores are weakly ordered: visible before the barrier
#endif
  }
}

}  // namespace

// The loop vectorises when the build has -fno-math-errno (otherwise GCC keeps a branch that sets errno
// for sqrt of a negative, and v is never negative); the pass is bound by memory either way (28 bytes
// moved per element, 32 when it clears the gradient too).
void adamw_step(float* param, float* grad, float* m, float* v, int64_t n, const AdamWParams& h,
                uint16_t* param_bf16) {
  MEGADLM_CHECK(n >= 0, "adamw_step: negative length ", n);
  MEGADLM_CHECK(h.step >= 1, "adamw_step: step ", h.step, " must be >= 1 (it is 1-based)");
  MEGADLM_CHECK(h.beta1 >= 0.0f && h.beta1 < 1.0f, "adamw_step: beta1 ", h.beta1, " is outside [0, 1)");
  MEGADLM_CHECK(h.beta2 >= 0.0f && h.beta2 < 1.0f, "adamw_step: beta2 ", h.beta2, " is outside [0, 1)");
  // The powers in double: beta2^t for t in the hundreds of thousands loses digits in fp32.
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
  const float step_size = static_cast<float>(h.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - h.lr * h.weight_decay;
  // 1 - beta is exact for fp32 betas in [0.5, 1) (Sterbenz), so these are the given betas' complements.
  const float b1 = h.beta1, b2 = h.beta2, one_b1 = 1.0f - h.beta1, one_b2 = 1.0f - h.beta2, eps = h.eps;
  const float gs = h.grad_scale;
  const AdamWConstants c{b1, b2, one_b1, one_b2, eps, gs, step_size, inv_sqrt_bc2, decay};
  if (param_bf16) {
    if (h.zero_grad) adamw_loop<true, true>(param, grad, m, v, param_bf16, n, c);
    else adamw_loop<true, false>(param, grad, m, v, param_bf16, n, c);
  } else {
    if (h.zero_grad) adamw_loop<false, true>(param, grad, m, v, nullptr, n, c);
    else adamw_loop<false, false>(param, grad, m, v, nullptr, n, c);
  }
}

// ---- reductions ----------------------------------------------------------------------------------------------

double sum_squares(const float* x, int64_t n) {
  MEGADLM_CHECK(n >= 0, "sum_squares: negative length ", n);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
    double s = 0.0;
    // The simd reduction reorders additions within the chunk, but the same way on every call: the order
    // depends on the compiled code, not on the threads.
#pragma omp simd reduction(+ : s)
    for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    partial[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

float abs_max(const float* x, int64_t n) {
  MEGADLM_CHECK(n >= 0, "abs_max: negative length ", n);
  // max is exact and order-free; NaN is tracked apart because comparisons with NaN are false.
  float best = 0.0f;
  int nan_seen = 0;
#pragma omp parallel for simd schedule(static) reduction(max : best) reduction(| : nan_seen) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    best = a > best ? a : best;
    nan_seen |= (x[i] != x[i]);
  }
  return nan_seen ? NAN : best;
}

bool all_finite(const float* x, int64_t n) {
  MEGADLM_CHECK(n >= 0, "all_finite: negative length ", n);
  // Tested on the bits (exponent all ones means inf or NaN), which vectorises and survives -ffast-math.
  int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    bad |= ((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace megadlm::cpu
