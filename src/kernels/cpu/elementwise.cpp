// Pointwise kernels: GELU (tanh approximation), SiLU, SwiGLU, bias, residual and scaling.
// Legend: N rows (tokens, B*T), C columns (hidden), F ffn hidden, n a flat element count.
//
// The activations of the MLP (GELU, SwiGLU) are written on 16-lane vectors (vec16.h, exponentials by
// exp2v); the other loops are `omp simd`, which vectorises them without -ffast-math (SiLU's exponential
// is vexp in vmath.h: glibc's expf is a scalar call the compiler cannot vectorise under strict IEEE
// flags). Threads split only flat ranges or rows, so every result is bitwise independent of the thread
// count; the one reduction (column_sums: bias_backward) sums fixed groups of rows, then the groups in order.
#include "kernels/cpu/elementwise.h"

#include "core/dtype.h"
#include "kernels/cpu/vec16.h"
#include "kernels/cpu/vmath.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

namespace megadlm::cpu {

namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = 1 << 14;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

}  // namespace

// ---- GELU (tanh approximation) ----------------------------------------------------------------
// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3). Since 1 + tanh(u) = 2 sigmoid(2u), the
// forward is x * s with s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u): one exponential, and no
// cancellation in 1 + tanh(u) for negative x. Written on 16-lane vectors (vec16.h): the scalar form
// with `omp simd` vectorised into three times the instructions (selects, masked tails, bf16 rounding
// through scalar-style integer code). e saturates at 2^127 for x below about -10, where x s is then
// ~x 2^-127 instead of an underflow to 0.

namespace {
using vec::v16;

// e = exp(-2u) = 2^(x (c1 + c3 x^2)), c1 = -2 sqrt(2/pi) log2(e), c3 = c1 * 0.044715.
inline v16 gelu_exp(v16 x) {
  constexpr float c1 = -2.0f * kSqrt2OverPi * 1.4426950408889634f, c3 = c1 * kGeluCubic;
  return vec::exp2v(x * (x * x * c3 + c1));
}
// x * sigmoid(2u), given e = gelu_exp(x); a NaN x stays NaN (through x itself).
inline v16 gelu16_of(v16 x, v16 e) { return x / (e + 1.0f); }
inline v16 gelu16(v16 x) { return gelu16_of(x, gelu_exp(x)); }
// d/dx [x s] = s + x * 2 s (1 - s) * du/dx with du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2), and
// 1 - s = e s (full relative precision where s is close to 1); given e = gelu_exp(x).
inline v16 gelu_grad16_of(v16 x, v16 e) {
  const v16 s = 1.0f / (1.0f + e);
  const v16 du = (x * x * (3.0f * kGeluCubic) + 1.0f) * kSqrt2OverPi;
  return s + 2.0f * x * s * (e * s) * du;
}
inline v16 gelu_grad16(v16 x) { return gelu_grad16_of(x, gelu_exp(x)); }

// 16 input elements as fp32 (bf16 widened, exactly) and as bf16 bits (fp32 rounded).
inline v16 values16(const float* x, int64_t m) { return vec::load16n(x, m); }
inline v16 values16(const uint16_t* x, int64_t m) { return vec::widen_bf16(vec::loadh16n(x, m)); }
inline vec::vh16 bf16_bits16(const float* x, int64_t m) { return vec::round_bf16_fast(vec::load16n(x, m)); }
inline vec::vh16 bf16_bits16(const uint16_t* x, int64_t m) { return vec::loadh16n(x, m); }

// Calls body(i, m) for the chunks [i, i + m) of [0, n), m = 16 but for the last, across the threads.
// Whole chunks go four at a time, so that their independent dependency chains interleave.
template <class Body>
inline void for_chunks16(int64_t n, Body&& body) {
  const int64_t quads = n / 64;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < quads; ++c) {
    body(c * 64, 16);
    body(c * 64 + 16, 16);
    body(c * 64 + 32, 16);
    body(c * 64 + 48, 16);
  }
  for (int64_t i = quads * 64; i < n; i += 16) body(i, std::min<int64_t>(16, n - i));
}

// Calls body(r, i, m) for the chunks [i, i + m) of [0, F) in every row r < N, m = 16 but for each row's
// last, rows split across the threads; a row's whole chunks go four at a time, as in for_chunks16.
template <class Body>
inline void for_row_chunks16(int64_t N, int64_t F, Body&& body) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
  for (int64_t r = 0; r < N; ++r) {
    int64_t i = 0;
    for (; i + 64 <= F; i += 64) {
      body(r, i, 16);
      body(r, i + 16, 16);
      body(r, i + 32, 16);
      body(r, i + 48, 16);
    }
    for (; i < F; i += 16) body(r, i, std::min<int64_t>(16, F - i));
  }
}
}  // namespace

// out [n], inp [n] (may alias)
void gelu_forward(float* out, const float* inp, int64_t n) {
  for_chunks16(n, [&](int64_t i, int64_t m) { vec::store16n(out + i, gelu16(vec::load16n(inp + i, m)), m); });
}

namespace {
// One chunk of the one-pass bf16 GELU: hb (the rounded input) kept at h_bf16 (or not: null), its
// activation rounded to out. m lanes.
inline void gelu_bf16_chunk(uint16_t* out, uint16_t* h_bf16, vec::vh16 hb, int64_t m) {
  if (h_bf16) vec::storeh16n(h_bf16, hb, m);
  vec::storeh16n(out, vec::round_bf16_fast(gelu16(vec::widen_bf16(hb))), m);
}

// out [n] bf16, h_bf16 [n] bf16 (or null), h [n] fp32 or bf16
template <typename T>
void gelu_forward_bf16_of(uint16_t* out, uint16_t* h_bf16, const T* h, int64_t n) {
  for_chunks16(n, [&](int64_t i, int64_t m) {
    gelu_bf16_chunk(out + i, h_bf16 ? h_bf16 + i : nullptr, bf16_bits16(h + i, m), m);
  });
}

// dinp [n] (written, may alias dout), inp [n] fp32 or bf16, dout [n]
template <typename T>
void gelu_backward_of(float* dinp, const T* inp, const float* dout, int64_t n) {
  for_chunks16(n, [&](int64_t i, int64_t m) {
    vec::store16n(dinp + i, vec::load16n(dout + i, m) * gelu_grad16(values16(inp + i, m)), m);
  });
}
}  // namespace

void gelu_forward_bf16(uint16_t* out, uint16_t* h_bf16, const float* h, int64_t n) {
  gelu_forward_bf16_of(out, h_bf16, h, n);
}
void gelu_forward_bf16(uint16_t* out, const uint16_t* h, int64_t n) { gelu_forward_bf16_of(out, nullptr, h, n); }

// out, h_bf16 (or null), h [N, F]; bias [F]
void gelu_forward_bf16(uint16_t* out, uint16_t* h_bf16, const float* h, const float* bias, int64_t N, int64_t F) {
  for_row_chunks16(N, F, [&](int64_t r, int64_t i, int64_t m) {
    const int64_t at = r * F + i;
    const vec::vh16 hb = vec::round_bf16_fast(vec::load16n(h + at, m) + vec::load16n(bias + i, m));
    gelu_bf16_chunk(out + at, h_bf16 ? h_bf16 + at : nullptr, hb, m);
  });
}

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

namespace {
// sigmoid(g) = 1 / (1 + e), e = exp(-g), on vectors (see GELU above); returns s and sets e.
inline v16 sigmoid16(v16 g, v16& e) {
  e = vec::exp2v(g * -1.4426950408889634f);
  return 1.0f / (1.0f + e);
}

}  // namespace

// out [N, F], gate_up [N, 2F]
void swiglu_forward(float* out, const float* gate_up, int64_t N, int64_t F) {
  for_row_chunks16(N, F, [&](int64_t r, int64_t i, int64_t m) {
    const float* g = gate_up + r * 2 * F + i;
    const v16 gate = vec::load16n(g, m);
    v16 e;
    vec::store16n(out + r * F + i, gate * sigmoid16(gate, e) * vec::load16n(g + F, m), m);
  });
}

namespace {
// out [N, F] bf16, gate_up_bf16 [N, 2F] bf16 (or null), gate_up [N, 2F] fp32 or bf16
template <typename T>
void swiglu_forward_bf16_of(uint16_t* out, uint16_t* gate_up_bf16, const T* gate_up, int64_t N, int64_t F) {
  for_row_chunks16(N, F, [&](int64_t r, int64_t i, int64_t m) {
    const T* g = gate_up + r * 2 * F + i;
    const vec::vh16 gb = bf16_bits16(g, m), ub = bf16_bits16(g + F, m);
    if (gate_up_bf16) {
      vec::storeh16n(gate_up_bf16 + r * 2 * F + i, gb, m);
      vec::storeh16n(gate_up_bf16 + r * 2 * F + F + i, ub, m);
    }
    const v16 gate = vec::widen_bf16(gb);
    v16 e;
    vec::storeh16n(out + r * F + i, vec::round_bf16_fast(gate * sigmoid16(gate, e) * vec::widen_bf16(ub)), m);
  });
}
}  // namespace

void swiglu_forward_bf16(uint16_t* out, uint16_t* gate_up_bf16, const float* gate_up, int64_t N, int64_t F) {
  swiglu_forward_bf16_of(out, gate_up_bf16, gate_up, N, F);
}
void swiglu_forward_bf16(uint16_t* out, const uint16_t* gate_up, int64_t N, int64_t F) {
  swiglu_forward_bf16_of(out, nullptr, gate_up, N, F);
}

namespace {
// dgate = dout * up * silu'(gate) with silu'(x) = s (1 + x (1 - s)) and 1 - s = e s; dup = dout * silu(gate).
// Out is fp32 (float) or rounded to bf16 (uint16_t, as f32_to_bf16).
inline void store_grad16(float* p, v16 x, int64_t m) { vec::store16n(p, x, m); }
inline void store_grad16(uint16_t* p, v16 x, int64_t m) { vec::storeh16n(p, vec::round_bf16(x), m); }

template <typename Out, typename T>
void swiglu_backward_of(Out* dgate_up, const T* gate_up, const float* dout, int64_t N, int64_t F) {
  for_row_chunks16(N, F, [&](int64_t r, int64_t i, int64_t m) {
    const T* g = gate_up + r * 2 * F + i;
    // Both reads come before the writes, so dgate_up may alias gate_up.
    const v16 x = values16(g, m), up = values16(g + F, m), d = vec::load16n(dout + r * F + i, m);
    v16 e;
    const v16 s = sigmoid16(x, e);
    Out* dg = dgate_up + r * 2 * F + i;
    store_grad16(dg, d * up * s * (x * (e * s) + 1.0f), m);
    store_grad16(dg + F, d * x * s, m);
  });
}
}  // namespace

// dgate_up [N, 2F] (written), gate_up [N, 2F], dout [N, F]
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int64_t N, int64_t F) {
  swiglu_backward_of(dgate_up, gate_up, dout, N, F);
}
void swiglu_backward(float* dgate_up, const uint16_t* gate_up, const float* dout, int64_t N, int64_t F) {
  swiglu_backward_of(dgate_up, gate_up, dout, N, F);
}
void swiglu_backward_bf16(uint16_t* dgate_up, const uint16_t* gate_up, const float* dout, int64_t N, int64_t F) {
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

namespace {
// Rows summed in fp32 before their sum joins a column's double sum (column_sums).
constexpr int64_t kRowGroup = 16;

// dbias [C] (or null) += sum over rows of the values [N, C], and out [N, C] = bf16(values) unless out is
// null; values(r, c, m) gives row r's columns c .. c + m - 1 (m <= 16) in the first m lanes. A column's
// rows are summed in groups of kRowGroup (rows 0..15, 16..31, ...) in fp32, in row order, and the groups'
// sums in group order in double, so the bits do not depend on the thread count. (A double add for every
// value would be a large share of the GELU backward's pass: on AVX-512 each is two conversions and two
// adds of 8 lanes.) Threads own whole row groups, walked row by row along memory, and write each group's
// fp32 sums to a row of `partial` [groups, C]; the double sums over the groups come after, by columns.
// (Threads owning blocks of 64 columns would walk every row at a stride of C elements, a new 4 KiB page
// at each row for the MLP's F columns, where the hardware prefetchers stop; docs/bench/decisions.md.)
template <class Values>
void column_sums(float* dbias, uint16_t* out, int64_t N, int64_t C, Values&& values) {
  const int64_t groups = (N + kRowGroup - 1) / kRowGroup, Cp = (C + 15) / 16 * 16;
  thread_local std::vector<float> partial_rows;  // grows to the largest call, then reused
  if (dbias != nullptr && static_cast<int64_t>(partial_rows.size()) < groups * Cp) partial_rows.resize(groups * Cp);
  float* partial = partial_rows.data();
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t g = 0; g < groups; ++g) {
    float* sums = dbias ? partial + g * Cp : nullptr;  // [Cp] this group's fp32 column sums
    const int64_t r0 = g * kRowGroup, r1 = std::min(N, r0 + kRowGroup);
    if (sums) std::fill(sums, sums + Cp, 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
      // Lanes past m carry no column of the row; their sums land in the padding of `sums`, unused.
      auto add = [&](int64_t c, int64_t m) {
        const v16 y = values(r, c, m);
        if (sums) vec::store16(sums + c, vec::load16(sums + c) + y);
        if (out) vec::storeh16n(out + r * C + c, vec::round_bf16(y), m);
      };
      int64_t c = 0;
      for (; c + 16 <= C; c += 16) add(c, 16);
      if (c < C) add(c, C - c);
    }
  }
  if (dbias == nullptr) return;
  using v8d = double __attribute__((vector_size(64)));
#pragma omp parallel for schedule(static) if (groups * C >= kParallelMin)
  for (int64_t c = 0; c < Cp; c += 16) {
    v8d lo = {}, hi = {};
    for (int64_t g = 0; g < groups; ++g) {
      const v16 y = vec::load16(partial + g * Cp + c);
      lo += __builtin_convertvector(vec::lo8(y), v8d);
      hi += __builtin_convertvector(vec::hi8(y), v8d);
    }
    for (int64_t j = 0; j < 16 && c + j < C; ++j) dbias[c + j] += static_cast<float>(j < 8 ? lo[j] : hi[j - 8]);
  }
}

// dout's row r, columns c .. c + m - 1.
struct Rows {
  const float* dout;
  int64_t C;
  v16 operator()(int64_t r, int64_t c, int64_t m) const { return vec::load16n(dout + r * C + c, m); }
};
}  // namespace

void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) {
  column_sums(dbias, nullptr, N, C, Rows{dout, C});
}

void cast_bf16_and_bias_backward(uint16_t* out, float* dbias, const float* dout, int64_t N, int64_t C) {
  column_sums(dbias, out, N, C, Rows{dout, C});
}

void gelu_backward_bf16_and_bias(uint16_t* dinp, float* dbias, const uint16_t* inp, const float* dout, int64_t N,
                                 int64_t F) {
  column_sums(dbias, dinp, N, F, [&](int64_t r, int64_t c, int64_t m) {
    return vec::load16n(dout + r * F + c, m) * gelu_grad16(values16(inp + r * F + c, m));
  });
}

void gelu_remake_and_backward_bf16(uint16_t* a, uint16_t* dinp, float* dbias, const uint16_t* inp,
                                   const float* dout, int64_t N, int64_t F) {
  column_sums(dbias, dinp, N, F, [&](int64_t r, int64_t c, int64_t m) {
    const v16 x = values16(inp + r * F + c, m), e = gelu_exp(x);
    vec::storeh16n(a + r * F + c, vec::round_bf16_fast(gelu16_of(x, e)), m);
    return vec::load16n(dout + r * F + c, m) * gelu_grad16_of(x, e);
  });
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
