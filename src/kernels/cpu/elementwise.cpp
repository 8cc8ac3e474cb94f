// Pointwise kernels: GELU (tanh approximation), SiLU, SwiGLU, bias, residual and scaling.
// Legend: N rows (tokens, B*T), C columns (hidden), F ffn hidden, n a flat element count.
//
// Every loop here is `omp simd` so that it vectorises without -ffast-math; the exponential is a
// vectorisable polynomial (vexp in vmath.h) because glibc's expf is a scalar call the compiler cannot
// vectorise under strict IEEE flags. Threads split only flat ranges or rows, so every result is
// bitwise independent of the thread count; the one reduction (bias_backward) splits columns, never rows.
#include "kernels/cpu/elementwise.h"

#include "core/dtype.h"
#include "kernels/cpu/vmath.h"

#include <bit>
#include <cstdint>

namespace megadlm::cpu {

namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 14;
// Column block of the row reductions: each thread owns whole columns, so a column's sum always runs
// over the rows in the same order whatever the number of threads.
constexpr int64_t kColBlock = 64;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

}  // namespace

// ---- GELU (tanh approximation) ----------------------------------------------------------------
// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3). Since 1 + tanh(u) = 2 sigmoid(2u), the
// forward is x * sigmoid(2u): one exponential, and no cancellation in 1 + tanh(u) for negative x.

namespace {
inline float gelu_of(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return x * vsigmoid(2.0f * u);
}
inline float swiglu_of(float gate, float up) { return gate * vsigmoid(gate) * up; }

// An input element as fp32 (bf16 widened, exactly), and rounded to bf16 (bf16 as it is).
inline float value_at(const float* x, int64_t i) { return x[i]; }
inline float value_at(const uint16_t* x, int64_t i) { return bf16_to_f32(x[i]); }
inline uint16_t bf16_at(const float* x, int64_t i) { return f32_to_bf16(x[i]); }
inline uint16_t bf16_at(const uint16_t* x, int64_t i) { return x[i]; }
}  // namespace

// out [n], inp [n] (may alias)
void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_of(inp[i]);
}

namespace {
// out [n] bf16, h_bf16 [n] bf16 (or null), h [n] fp32 or bf16
template <typename T>
void gelu_forward_bf16_of(uint16_t* out, uint16_t* h_bf16, const T* h, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t hb = bf16_at(h, i);
    if (h_bf16) h_bf16[i] = hb;
    out[i] = f32_to_bf16(gelu_of(bf16_to_f32(hb)));
  }
}
}  // namespace

void gelu_forward_bf16(uint16_t* out, uint16_t* h_bf16, const float* h, int64_t n) {
  gelu_forward_bf16_of(out, h_bf16, h, n);
}
void gelu_forward_bf16(uint16_t* out, const uint16_t* h, int64_t n) { gelu_forward_bf16_of(out, nullptr, h, n); }

namespace {
// d/dx [x s(2u)] = s + x * 2 s (1 - s) * du/dx, with s = sigmoid(2u) and 1 - s = e s for e = exp(-2u)
// (so 1 - s keeps full relative precision where s is close to 1).
template <typename T>
void gelu_backward_of(float* dinp, const T* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = value_at(inp, i);
    const float x2 = x * x;
    const float u = kSqrt2OverPi * (x + kGeluCubic * x2 * x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x2);
    const float e = vexp(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    const float one_minus_s = e * s;
    dinp[i] = dout[i] * (s + 2.0f * x * s * one_minus_s * du);
  }
}
}  // namespace

// dinp [n] (written, may alias dout), inp [n], dout [n]
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) { gelu_backward_of(dinp, inp, dout, n); }
void gelu_backward(float* dinp, const uint16_t* inp, const float* dout, int64_t n) {
  gelu_backward_of(dinp, inp, dout, n);
}

// ---- SiLU ---------------------------------------------------------------------------------------
// out [n], inp [n] (may alias)
void silu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x * vsigmoid(x);
  }
}

// d/dx [x s(x)] = s (1 + x (1 - s)), with 1 - s = e s for e = exp(-x).
// dinp [n] (written, may alias dout), inp [n], dout [n]
void silu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float e = vexp(-x);
    const float s = 1.0f / (1.0f + e);
    dinp[i] = dout[i] * s * (1.0f + x * (e * s));
  }
}

// ---- SwiGLU over Megatron's fused fc1 output -------------------------------------------------------
// gate_up [N, 2F] = [gate | up] per row (Megatron's --swiglu chunks fc1's output in two along the last
// dimension: the first half goes through SiLU).

// out [N, F], gate_up [N, 2F]
void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const float* g = gate_up + r * 2 * F;
    const float* u = g + F;
    float* o = out + r * F;
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) o[i] = swiglu_of(g[i], u[i]);
  }
}

namespace {
// out [N, F] bf16, gate_up_bf16 [N, 2F] bf16 (or null), gate_up [N, 2F] fp32 or bf16
template <typename T>
void swiglu_forward_bf16_of(uint16_t* out, uint16_t* gate_up_bf16, const T* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* g = gate_up + r * 2 * F;
    const T* u = g + F;
    uint16_t* gb = gate_up_bf16 ? gate_up_bf16 + r * 2 * F : nullptr;
    uint16_t* o = out + r * F;
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) {
      const uint16_t gi = bf16_at(g, i), ui = bf16_at(u, i);
      if (gb) gb[i] = gi, gb[F + i] = ui;
      o[i] = f32_to_bf16(swiglu_of(bf16_to_f32(gi), bf16_to_f32(ui)));
    }
  }
}
}  // namespace

void swiglu_forward_bf16(uint16_t* out, uint16_t* gate_up_bf16, const float* gate_up, int64_t N, int64_t F) {
  swiglu_forward_bf16_of(out, gate_up_bf16, gate_up, N, F);
}
void swiglu_forward_bf16(uint16_t* out, const uint16_t* gate_up, int64_t N, int64_t F) {
  swiglu_forward_bf16_of(out, nullptr, gate_up, N, F);
}

namespace {
// dgate = dout * up * silu'(gate), dup = dout * silu(gate).
template <typename T>
void swiglu_backward_of(float* dgate_up, const T* gate_up, const float* dout, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    const T* g = gate_up + r * 2 * F;
    const T* u = g + F;
    const float* d = dout + r * F;
    float* dg = dgate_up + r * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int64_t i = 0; i < F; ++i) {
      const float x = value_at(g, i);
      const float e = vexp(-x);
      const float s = 1.0f / (1.0f + e);
      const float up = value_at(u, i);  // both reads come before the writes, so dgate_up may alias gate_up
      const float di = d[i];
      dg[i] = di * up * s * (1.0f + x * (e * s));
      du[i] = di * x * s;
    }
  }
}
}  // namespace

// dgate_up [N, 2F] (written), gate_up [N, 2F], dout [N, F]
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N, int64_t F) {
  swiglu_backward_of(dgate_up, gate_up, dout, N, F);
}
void swiglu_backward(float* dgate_up, const uint16_t* gate_up, const float* dout, int64_t N, int64_t F) {
  swiglu_backward_of(dgate_up, gate_up, dout, N, F);
}

// ---- bias ---------------------------------------------------------------------------------------
// out [N, C] += bias [C]
void bias_add_forward(float* out, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    float* o = out + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] += bias[c];
  }
}

// dbias [C] += sum over rows of dout [N, C]. Threads own blocks of kColBlock columns and sum their
// rows in order 0..N-1 in double, so the bits do not depend on the thread count.
void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kColBlock;
    const int64_t w = C - c0 < kColBlock ? C - c0 : kColBlock;
    double acc[kColBlock] = {};
    for (int64_t r = 0; r < N; ++r) {
      const float* d = dout + r * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) acc[c] += d[c];
    }
    for (int64_t c = 0; c < w; ++c) dbias[c0 + c] += static_cast<float>(acc[c]);
  }
}

// ---- residual and scaling -------------------------------------------------------------------------
// out [n] = a [n] + b [n]; out may alias a or b.
void residual_add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// a [n] += b [n]
void add_inplace(float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

// a [n] *= s
void scale_inplace(float* a, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) a[i] *= s;
}

}  // namespace megadlm::cpu
