// Fused softmax cross-entropy: loss and dlogits from three passes over each row of logits.
// Legend: N tokens, V vocabulary (padded, e.g. 50304).
//
// Per row: (1) the max, (2) e_v = exp(x_v - max) and their sum, stored into dlogits when it is wanted,
// (3) dlogits = e_v * grad_scale * w / sum, minus grad_scale * w at the target. Storing e_v in pass 2
// means exp runs once per logit; the row (4 V bytes = 200 KB at V = 50304) is still in L2 for pass 3.
// Rows are independent and the returned total is summed over rows 0..N-1 in double after the parallel
// loop, so every output bit is independent of the thread count.
#include "kernels/cpu/cross_entropy.h"

#include "kernels/cpu/vec16.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace megadlm::cpu {

namespace {

using vec::v16;

constexpr int64_t kParallelMin = 1 << 14;  // elements below which threads cost more than they save
constexpr int64_t kSumBlock = 512;         // terms per fp32 partial sum of the softmax denominator

// sum_v exp(x[v] - mx) over x[0..V), also writing each term to d[v] when d is not null. Blocks of
// kSumBlock terms are summed in fp32 by the vector lanes and the block sums in double: nearly double
// accuracy at fp32 speed. Fixed blocks, fixed order.
// Logits are fp32 or, under --bf16, bf16 bits (Megatron's output layer gives bf16 logits too); every
// sum and the gradient are computed in fp32 either way.
inline float logit(const float* x, int64_t v) { return x[v]; }
inline float logit(const uint16_t* x, int64_t v) { return bf16_to_f32(x[v]); }
// The n <= 16 logits at x as fp32, lanes past n at -inf (whose exponential adds 0).
inline v16 logits16(const float* x, int64_t n) {
  if (n == 16) return vec::load16(x);
  alignas(64) float t[16];
  std::fill(t, t + 16, -INFINITY);
  std::copy(x, x + n, t);
  return vec::load16(t);
}
inline v16 logits16(const uint16_t* x, int64_t n) {
  if (n == 16) return vec::widen_bf16(vec::loadh16n(x, 16));
  alignas(64) float t[16];
  std::fill(t, t + 16, -INFINITY);
  for (int64_t i = 0; i < n; ++i) t[i] = bf16_to_f32(x[i]);
  return vec::load16(t);
}

template <typename T>
double sum_exp_blocked(const T* x, int64_t V, float mx, float* d) {
  const v16 m = vec::splat(mx);
  double sum = 0.0;
  for (int64_t v0 = 0; v0 < V; v0 += kSumBlock) {
    const int64_t v1 = v0 + kSumBlock < V ? v0 + kSumBlock : V;
    v16 block{};
    for (int64_t v = v0; v < v1; v += 16) {
      const int64_t n = std::min<int64_t>(16, v1 - v);
      const v16 e = vec::expv(logits16(x + v, n) - m);
      if (d) vec::store16n(d + v, e, n);
      block += e;
    }
    sum += static_cast<double>(vec::sum_lanes(block));
  }
  return sum;
}

// Pass 1 of a row: its max, so that every exponent is <= 0 (no overflow for logits of any size).
// Four running vector maxima: one alone waits on its previous compare at every step. The max is the
// same value in any order; NaN logits are passed over (y > m is false for them).
template <typename T>
inline float max_of_row(const T* x, int64_t V) {
  const v16 none = vec::splat(-INFINITY);
  v16 m[4] = {none, none, none, none};
  int64_t v = 0;
  for (; v + 64 <= V; v += 64)
    for (int j = 0; j < 4; ++j) {
      const v16 y = logits16(x + v + 16 * j, 16);
      m[j] = vec::vmax(y, m[j]);
    }
  for (; v < V; v += 16) {
    const v16 y = logits16(x + v, std::min<int64_t>(16, V - v));  // lanes past V are -inf
    m[0] = vec::vmax(y, m[0]);
  }
  float mx = -INFINITY;
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 16; ++l) mx = m[j][l] > mx ? m[j][l] : mx;
  return mx;
}

// The gradient row of an ignored target: zeros (fp32 or bf16 bits).
template <typename T>
inline void zero_row(T* d, int64_t V) {
#pragma omp simd
  for (int64_t v = 0; v < V; ++v) d[v] = T(0);
}

// Pass 3 of a row into bf16: out[v] = bf16(e[v] * k), and at the target (when t >= 0) bf16(e[t] * k - c):
// the bits the fp32 gradient (d *= k; d[t] -= c) rounds to.
void scaled_row_to_bf16(uint16_t* out, const float* e, int64_t V, float k, int64_t t, float c) {
  const float et = t >= 0 ? e[t] : 0.0f;  // read first, in case out overlaps e
  const v16 kv = vec::splat(k);
  for (int64_t v = 0; v < V; v += 16) {
    const int64_t n = std::min<int64_t>(16, V - v);
    vec::storeh16n(out + v, vec::round_bf16(vec::load16n(e + v, n) * kv), n);
  }
  if (t >= 0) out[t] = f32_to_bf16(et * k - c);
}

void check_targets(const int32_t* targets, int64_t ignore_index, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    MEGADLM_CHECK(t == ignore_index || (t >= 0 && t < V), "cross_entropy: targets[", n, "] = ", t,
                  " is outside the vocabulary [0, ", V, ") and is not ignore_index (", ignore_index, ")");
  }
}

}  // namespace

// losses [N] (or null), dlogits [N, V] (or null; may alias logits), logits [N, V], targets [N],
// weights [N] (or null = all ones). Targets must lie in [0, V) or equal ignore_index.
double cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                      const float* weights, int64_t ignore_index, float grad_scale, int64_t N,
                                      int64_t V) {
  // Validate before the parallel loop: an exception must not escape an OpenMP region.
  check_targets(targets, ignore_index, N, V);
  std::vector<double> row_loss(N);

#pragma omp parallel for schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    float* d = dlogits ? dlogits + n * V : nullptr;
    const int64_t t = targets[n];
    if (t == ignore_index) {
      row_loss[n] = 0.0;
      if (losses) losses[n] = 0.0f;
      if (d) zero_row(d, V);
      continue;
    }
    const double w = weights ? static_cast<double>(weights[n]) : 1.0;
    const float mx = max_of_row(x, V);
    const float xt = x[t];  // read before pass 2 overwrites it when dlogits aliases logits

    // Pass 2: sum of exp(x - max), in fp32 blocks summed in double (a double reduction over the whole
    // row runs several times slower: the conversions defeat the vectoriser).
    const double sum = sum_exp_blocked(x, V, mx, d);
    const double logsumexp = static_cast<double>(mx) + std::log(sum);
    const double loss = w * (logsumexp - static_cast<double>(xt));
    row_loss[n] = loss;
    if (losses) losses[n] = static_cast<float>(loss);

    // Pass 3: softmax times grad_scale * w, minus the one-hot.
    if (d) {
      const float k = static_cast<float>(static_cast<double>(grad_scale) * w / sum);
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) d[v] *= k;
      d[t] -= static_cast<float>(static_cast<double>(grad_scale) * w);
    }
  }

  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) total += row_loss[n];
  return total;
}

// The same three passes with the gradient rounded to bf16 on its way out: pass 2 keeps the row's
// exponentials in a per-thread row (which stays in L2), so neither an fp32 gradient nor the overwritten
// logits go back to memory, and no separate cast reads them again.
namespace {

// The bf16-gradient kernel for fp32 or bf16 logits. The row's exponentials go to a per-thread row, so
// the gradient row is written only after the logits row has been read in full: out may be the logits.
template <typename T>
double cross_entropy_bf16_out(float* losses, uint16_t* dlogits_bf16, const T* logits, const int32_t* targets,
                              const float* weights, int64_t ignore_index, float grad_scale, int64_t N, int64_t V) {
  check_targets(targets, ignore_index, N, V);
  std::vector<double> row_loss(N);
#pragma omp parallel for schedule(static) if (N * V >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    uint16_t* out = dlogits_bf16 + n * V;
    const int64_t t = targets[n];
    if (t == ignore_index) {
      row_loss[n] = 0.0;
      if (losses) losses[n] = 0.0f;
      zero_row(out, V);
      continue;
    }
    const double w = weights ? static_cast<double>(weights[n]) : 1.0;
    const float mx = max_of_row(x, V);
    thread_local std::vector<float> e;  // grows once per thread
    if (static_cast<int64_t>(e.size()) < V) e.resize(static_cast<size_t>(V));
    const double sum = sum_exp_blocked(x, V, mx, e.data());
    const double loss = w * (static_cast<double>(mx) + std::log(sum) - static_cast<double>(logit(x, t)));
    row_loss[n] = loss;
    if (losses) losses[n] = static_cast<float>(loss);
    scaled_row_to_bf16(out, e.data(), V, static_cast<float>(static_cast<double>(grad_scale) * w / sum), t,
                       static_cast<float>(static_cast<double>(grad_scale) * w));
  }
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) total += row_loss[n];
  return total;
}

}  // namespace

double cross_entropy_forward_backward_bf16(float* losses, uint16_t* dlogits_bf16, const float* logits,
                                           const int32_t* targets, const float* weights, int64_t ignore_index,
                                           float grad_scale, int64_t N, int64_t V) {
  return cross_entropy_bf16_out(losses, dlogits_bf16, logits, targets, weights, ignore_index, grad_scale, N, V);
}

double cross_entropy_forward_backward_bf16(float* losses, uint16_t* dlogits, const uint16_t* logits,
                                           const int32_t* targets, const float* weights, int64_t ignore_index,
                                           float grad_scale, int64_t N, int64_t V) {
  return cross_entropy_bf16_out(losses, dlogits, logits, targets, weights, ignore_index, grad_scale, N, V);
}

// ---- vocab-parallel pieces: the same three passes, with the row reductions done across ranks ----

void cross_entropy_shard_max(float* row_max, const float* logits, const int32_t* targets, int64_t ignore_index,
                             int64_t N, int64_t Vl) {
#pragma omp parallel for schedule(static) if (N * Vl >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) {
      row_max[n] = 0.0f;
      continue;
    }
    row_max[n] = max_of_row(logits + n * Vl, Vl);
  }
}

void cross_entropy_shard_sumexp(double* stats, float* e, const float* logits, const float* row_max,
                                const int32_t* targets, int64_t ignore_index, int64_t vocab_start, int64_t N,
                                int64_t Vl) {
#pragma omp parallel for schedule(static) if (N * Vl >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * Vl;
    float* d = e ? e + n * Vl : nullptr;
    const int64_t t = targets[n];
    if (t == ignore_index) {
      stats[2 * n] = stats[2 * n + 1] = 0.0;
      if (d) zero_row(d, Vl);
      continue;
    }
    const int64_t tl = t - vocab_start;
    // Read before the loop below overwrites it when e aliases logits.
    stats[2 * n + 1] = tl >= 0 && tl < Vl ? static_cast<double>(x[tl]) : 0.0;
    const float mx = row_max[n];
    const double sum = sum_exp_blocked(x, Vl, mx, d);  // as in the single-rank kernel
    stats[2 * n] = sum;
  }
}

namespace {

// The loop of piece (3), on fp32 or bf16 logits: each row's loss from the reduced stats, stored in
// losses (or not) and summed over rows 0..N-1 in double; `ignored(n)` clears the gradient of an ignored
// row, `gradient(n, k, c, tl)` writes another's, with k = grad_scale w / sum, c = grad_scale w and tl
// the target's column in the shard (-1 when another rank holds it).
template <typename Ignored, typename Gradient>
double finish_rows(float* losses, const double* stats, const float* row_max, const int32_t* targets,
                   const float* weights, int64_t ignore_index, float grad_scale, int64_t vocab_start, int64_t N,
                   int64_t Vl, Ignored ignored, Gradient gradient) {
  std::vector<double> row_loss(N);
#pragma omp parallel for schedule(static) if (N * Vl >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    if (t == ignore_index) {
      row_loss[n] = 0.0;
      if (losses) losses[n] = 0.0f;
      ignored(n);
      continue;
    }
    const double w = weights ? static_cast<double>(weights[n]) : 1.0;
    const double sum = stats[2 * n];
    const double loss = w * (static_cast<double>(row_max[n]) + std::log(sum) - stats[2 * n + 1]);
    row_loss[n] = loss;
    if (losses) losses[n] = static_cast<float>(loss);
    const int64_t tl = t - vocab_start;
    gradient(n, static_cast<float>(static_cast<double>(grad_scale) * w / sum),
             static_cast<float>(static_cast<double>(grad_scale) * w), tl >= 0 && tl < Vl ? tl : int64_t{-1});
  }
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) total += row_loss[n];
  return total;
}

}  // namespace

double cross_entropy_shard_finish(float* losses, float* dlogits, const double* stats, const float* row_max,
                                  const int32_t* targets, const float* weights, int64_t ignore_index,
                                  float grad_scale, int64_t vocab_start, int64_t N, int64_t Vl,
                                  uint16_t* dlogits_bf16) {
  return finish_rows(
      losses, stats, row_max, targets, weights, ignore_index, grad_scale, vocab_start, N, Vl,
      [&](int64_t n) {
        if (dlogits_bf16) zero_row(dlogits_bf16 + n * Vl, Vl);  // dlogits already zero from pass (2)
      },
      [&](int64_t n, float k, float c, int64_t tl) {
        if (!dlogits) return;
        float* d = dlogits + n * Vl;  // e from pass (2)
        if (dlogits_bf16) {
          scaled_row_to_bf16(dlogits_bf16 + n * Vl, d, Vl, k, tl, c);
          return;
        }
#pragma omp simd
        for (int64_t v = 0; v < Vl; ++v) d[v] *= k;
        if (tl >= 0) d[tl] -= c;
      });
}

// ---- the vocab-parallel pieces on bf16 logits --------------------------------------------------------
// No fp32 [N, Vl] buffer exists here to keep the exponentials between the reductions, so the finish
// recomputes them from the logits (one more exp per logit, at tp > 1 only) and writes the gradient over
// the logits element by element.

void cross_entropy_shard_max(float* row_max, const uint16_t* logits, const int32_t* targets, int64_t ignore_index,
                             int64_t N, int64_t Vl) {
#pragma omp parallel for schedule(static) if (N * Vl >= kParallelMin)
  for (int64_t n = 0; n < N; ++n)
    row_max[n] = targets[n] == ignore_index ? 0.0f : max_of_row(logits + n * Vl, Vl);
}

void cross_entropy_shard_sumexp(double* stats, const uint16_t* logits, const float* row_max, const int32_t* targets,
                                int64_t ignore_index, int64_t vocab_start, int64_t N, int64_t Vl) {
#pragma omp parallel for schedule(static) if (N * Vl >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const uint16_t* x = logits + n * Vl;
    const int64_t t = targets[n];
    if (t == ignore_index) {
      stats[2 * n] = stats[2 * n + 1] = 0.0;
      continue;
    }
    const int64_t tl = t - vocab_start;
    stats[2 * n + 1] = tl >= 0 && tl < Vl ? static_cast<double>(logit(x, tl)) : 0.0;
    stats[2 * n] = sum_exp_blocked(x, Vl, row_max[n], static_cast<float*>(nullptr));
  }
}

double cross_entropy_shard_finish(float* losses, uint16_t* dlogits, const uint16_t* logits, const double* stats,
                                  const float* row_max, const int32_t* targets, const float* weights,
                                  int64_t ignore_index, float grad_scale, int64_t vocab_start, int64_t N,
                                  int64_t Vl) {
  return finish_rows(
      losses, stats, row_max, targets, weights, ignore_index, grad_scale, vocab_start, N, Vl,
      [&](int64_t n) {
        if (dlogits) zero_row(dlogits + n * Vl, Vl);
      },
      [&](int64_t n, float k, float c, int64_t tl) {
        if (!dlogits) return;
        const uint16_t* x = logits + n * Vl;
        uint16_t* d = dlogits + n * Vl;
        const float mx = row_max[n];
        // The exponentials as the sum made them (expv); the target's before the row is overwritten.
        const float et = tl >= 0 ? vec::expv(vec::splat(logit(x, tl) - mx))[0] : 0.0f;
        const v16 m = vec::splat(mx), kv = vec::splat(k);
        for (int64_t v = 0; v < Vl; v += 16) {
          const int64_t n = std::min<int64_t>(16, Vl - v);
          vec::storeh16n(d + v, vec::round_bf16(vec::expv(logits16(x + v, n) - m) * kv), n);
        }
        if (tl >= 0) d[tl] = f32_to_bf16(et * k - c);
      });
}

}  // namespace megadlm::cpu
