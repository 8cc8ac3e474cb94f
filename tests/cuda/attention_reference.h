#pragma once
// The double-precision attention reference shared by the CUDA attention tests (test_cuda_attention.cpp,
// test_attention_cudnn.cpp): an explicit softmax per query row, forward (out, lse) and backward (dq, dk,
// dv), for every mask type and GQA; and the scope that selects an implementation for one check.
// Empty without MEGADLM_HAVE_CUDA. Legend: B batch, T sequence, H heads, K kv heads, D head dim.
#include <cmath>
#include <vector>

#include "cuda/cuda_test_util.h"

#ifdef MEGADLM_HAVE_CUDA
namespace megadlm::test {

struct Shape {
  int64_t B, T, H, K, D;
};

inline bool visible(const AttentionMask& m, const std::vector<int32_t>& seg, int64_t b, int64_t T, int64_t i, int64_t j) {
  if (m.type == MaskType::Causal && j > i) return false;
  if (m.type == MaskType::BlockCausal && j / m.block_size > i / m.block_size) return false;
  if (m.type == MaskType::BlockDiffusion) {  // [x_t ; x_0]: kernels/types.h
    const int64_t half = T / 2, bq = (i % half) / m.block_size, bk = (j % half) / m.block_size;
    const bool ok = i < half ? (j < half ? bk == bq : bk < bq) : (j >= half && bk <= bq);
    if (!ok) return false;
  }
  if (!seg.empty() && seg[b * T + i] != seg[b * T + j]) return false;
  return true;
}

struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
};

// Explicit softmax per query row, in double.
inline Ref reference(const Shape& s, const AttentionMask& m, const std::vector<int32_t>& seg, const std::vector<float>& q,
              const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dout, double scale) {
  const auto [B, T, H, K, D] = s;
  Ref r;
  r.out.assign(B * T * H * D, 0.0), r.lse.assign(B * H * T, -INFINITY);
  r.dq.assign(B * T * H * D, 0.0), r.dk.assign(B * T * K * D, 0.0), r.dv.assign(B * T * K * D, 0.0);
  std::vector<double> p(T), dp(T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / K);
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = &q[((b * T + i) * H + h) * D];
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          p[j] = -INFINITY;
          if (!visible(m, seg, b, T, i, j)) continue;
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += double(qi[e]) * k[((b * T + j) * K + g) * D + e];
          p[j] = d * scale;
          mx = std::fmax(mx, p[j]);
        }
        if (mx == -INFINITY) continue;  // no visible key: out 0, lse -inf, zero gradients
        double z = 0;
        for (int64_t j = 0; j < T; ++j) z += p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx);
        r.lse[(b * H + h) * T + i] = mx + std::log(z);
        for (int64_t j = 0; j < T; ++j) p[j] = p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx) / z;
        double* oi = &r.out[((b * T + i) * H + h) * D];
        for (int64_t j = 0; j < T; ++j)
          for (int64_t e = 0; e < D; ++e) oi[e] += p[j] * v[((b * T + j) * K + g) * D + e];
        // Backward of this row.
        const float* di = &dout[((b * T + i) * H + h) * D];
        double delta = 0;
        for (int64_t j = 0; j < T; ++j) {
          dp[j] = 0;
          for (int64_t e = 0; e < D; ++e) dp[j] += double(di[e]) * v[((b * T + j) * K + g) * D + e];
          delta += p[j] * dp[j];
        }
        for (int64_t j = 0; j < T; ++j) {
          if (p[j] == 0.0) continue;
          const double ds = p[j] * (dp[j] - delta);
          for (int64_t e = 0; e < D; ++e) {
            r.dq[((b * T + i) * H + h) * D + e] += scale * ds * k[((b * T + j) * K + g) * D + e];
            r.dk[((b * T + j) * K + g) * D + e] += scale * ds * qi[e];
            r.dv[((b * T + j) * K + g) * D + e] += p[j] * di[e];
          }
        }
      }
    }
  return r;
}

// Selects an implementation for the scope of one check, and restores Auto after it.
struct ImplScope {
  explicit ImplScope(cuda::AttentionImpl impl) { cuda::set_attention_impl(impl); }
  ~ImplScope() { cuda::set_attention_impl(cuda::AttentionImpl::Auto); }
};

inline AttentionMask mask_of(MaskType t, int64_t block = 0) {
  AttentionMask m;
  m.type = t;
  m.block_size = block;
  return m;
}

}  // namespace megadlm::test
#endif  // MEGADLM_HAVE_CUDA
