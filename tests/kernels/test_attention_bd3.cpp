// The block-diffusion attention mask (MaskType::BlockDiffusion, the 2T training layout of BD3-LM):
// the fp32 and the bf16 CPU kernels, forward and backward, against a double-precision masked softmax
// that materialises the 2T x 2T scores; GQA, several T (tile multiples and not), block lengths that do
// and do not divide T, packed documents on top. A probe with equal scores shows which keys each query
// averages over, pinning the mask itself to its definition.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_bf16.h"
#include "test_util.h"

using namespace megadlm;
using namespace megadlm::cpu;
using megadlm::test::max_rel_error;
using megadlm::test::random_vector;

namespace {

constexpr double kNegInfD = -std::numeric_limits<double>::infinity();

// The mask as BD3-LM defines it, written out on its own: rows [0, half) are the noised copy x_t,
// rows [half, 2 half) the clean x_0; blocks of L by the index within the half.
bool bd3_visible(int64_t half, int64_t L, int64_t i, int64_t j) {
  const bool qi_clean = i >= half, kj_clean = j >= half;
  const int64_t bq = (qi_clean ? i - half : i) / L, bk = (kj_clean ? j - half : j) / L;
  if (!qi_clean && !kj_clean) return bq == bk;  // M_BD: the noised block itself, bidirectional
  if (!qi_clean && kj_clean) return bk < bq;    // M_OBC: the clean blocks before it
  if (qi_clean && kj_clean) return bk <= bq;    // M_BC: block-causal over the clean copy
  return false;                                 // clean never sees noised
}

struct Case {
  int64_t B, T2, H, K, D, L;  // T2: the rows of the layout (2 x the sequence length)
  bool segments;
};

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.B) + " 2T=" + std::to_string(c.T2) + " H=" + std::to_string(c.H) +
         " K=" + std::to_string(c.K) + " D=" + std::to_string(c.D) + " L'=" + std::to_string(c.L) +
         (c.segments ? " +segments" : "");
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Explicit scores, masked softmax and its analytic backward, in double.
Reference reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout, const int32_t* seg_all,
                    double scale) {
  const int64_t B = c.B, T = c.T2, H = c.H, K = c.K, D = c.D, G = H / K, half = T / 2;
  Reference r;
  r.out.assign(B * T * H * D, 0.0);
  r.lse.assign(B * H * T, kNegInfD);
  r.dq.assign(B * T * H * D, 0.0);
  r.dk.assign(B * T * K * D, 0.0);
  r.dv.assign(B * T * K * D, 0.0);
  std::vector<double> p(T * T);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* seg = seg_all ? seg_all + b * T : nullptr;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / G;
      auto Q = [&](int64_t i, int64_t d) { return q[((b * T + i) * H + h) * D + d]; };
      auto Kx = [&](int64_t j, int64_t d) { return k[((b * T + j) * K + g) * D + d]; };
      auto V = [&](int64_t j, int64_t d) { return v[((b * T + j) * K + g) * D + d]; };
      auto dO = [&](int64_t i, int64_t d) { return dout[((b * T + i) * H + h) * D + d]; };
      for (int64_t i = 0; i < T; ++i) {
        double mx = kNegInfD;
        for (int64_t j = 0; j < T; ++j) {
          double s = kNegInfD;
          if (bd3_visible(half, c.L, i, j) && (seg == nullptr || seg[i] == seg[j])) {
            s = 0;
            for (int64_t d = 0; d < D; ++d) s += Q(i, d) * Kx(j, d);
            s *= scale;
          }
          p[i * T + j] = s;
          mx = std::fmax(mx, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += std::exp(p[i * T + j] - mx);
        for (int64_t j = 0; j < T; ++j) p[i * T + j] = std::exp(p[i * T + j] - mx) / sum;
        r.lse[(b * H + h) * T + i] = mx + std::log(sum);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j) o += p[i * T + j] * V(j, d);
          r.out[((b * T + i) * H + h) * D + d] = o;
        }
        std::vector<double> dp(T);
        double rowdot = 0;
        for (int64_t j = 0; j < T; ++j) {
          for (int64_t d = 0; d < D; ++d) dp[j] += dO(i, d) * V(j, d);
          rowdot += p[i * T + j] * dp[j];
        }
        for (int64_t j = 0; j < T; ++j) {
          const double pij = p[i * T + j], ds = pij * (dp[j] - rowdot) * scale;
          for (int64_t d = 0; d < D; ++d) {
            r.dq[((b * T + i) * H + h) * D + d] += ds * Kx(j, d);
            r.dk[((b * T + j) * K + g) * D + d] += ds * Q(i, d);
            r.dv[((b * T + j) * K + g) * D + d] += pij * dO(i, d);
          }
        }
      }
    }
  }
  return r;
}

// Two documents per row, the border inside the first half (each query still sees itself).
std::vector<int32_t> make_segments(int64_t B, int64_t T) {
  std::vector<int32_t> seg(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) seg[b * T + t] = (t % (T / 2)) < T / 5 ? 3 : 8;
  return seg;
}

struct Inputs {
  std::vector<float> q, k, v, dout;
  std::vector<int32_t> seg;
  AttentionMask mask;
  float scale;
};

Inputs make_inputs(const Case& c, uint64_t seed, bool bf16_valued) {
  Inputs in;
  in.q = random_vector(c.B * c.T2 * c.H * c.D, seed, -1.0f, 1.0f);
  in.k = random_vector(c.B * c.T2 * c.K * c.D, seed + 1, -1.5f, 1.5f);
  in.v = random_vector(c.B * c.T2 * c.K * c.D, seed + 2);
  in.dout = random_vector(c.B * c.T2 * c.H * c.D, seed + 3);
  if (bf16_valued)
    for (auto* x : {&in.q, &in.k, &in.v})
      for (float& e : *x) e = bf16_to_f32(f32_to_bf16(e));
  if (c.segments) in.seg = make_segments(c.B, c.T2);
  in.mask = AttentionMask{MaskType::BlockDiffusion, c.L, c.segments ? in.seg.data() : nullptr};
  in.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  return in;
}

Reference reference_of(const Case& c, const Inputs& in) {
  return reference(c, test::to_double(in.q), test::to_double(in.k), test::to_double(in.v), test::to_double(in.dout),
                   c.segments ? in.seg.data() : nullptr, in.scale);
}

void check_fp32(const Case& c, uint64_t seed) {
  SCOPED_TRACE(describe(c));
  const Inputs in = make_inputs(c, seed, false);
  const int64_t B = c.B, T = c.T2, H = c.H, K = c.K, D = c.D;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(in.q.size(), nan), lse(B * H * T, nan);
  attention_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), B, T, H, K, D, in.mask, in.scale);
  std::vector<float> dq(in.q.size(), nan), dk(in.k.size(), nan), dv(in.v.size(), nan);
  attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(), in.v.data(),
                     out.data(), lse.data(), B, T, H, K, D, in.mask, in.scale);
  const Reference r = reference_of(c, in);
  EXPECT_LT(max_rel_error(lse, r.lse), 2e-5) << "lse";
  EXPECT_LT(max_rel_error(out, r.out), 2e-5) << "out";
  EXPECT_LT(max_rel_error(dq, r.dq), 3e-5) << "dq";
  EXPECT_LT(max_rel_error(dk, r.dk), 3e-5) << "dk";
  EXPECT_LT(max_rel_error(dv, r.dv), 3e-5) << "dv";
}

std::vector<bf16_t> to_bf16(const std::vector<float>& x) {
  std::vector<bf16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i].bits = f32_to_bf16(x[i]);
  return y;
}

// bf16 operands: the tolerances of tests/kernels/test_attention_bf16.cpp (P, dS and dO rounded to bf16).
void check_bf16(const Case& c, uint64_t seed, AttentionBackwardSchedule schedule) {
  SCOPED_TRACE(describe(c) + (schedule == AttentionBackwardSchedule::Fused ? " fused" : " two-pass"));
  const Inputs in = make_inputs(c, seed, true);
  const int64_t B = c.B, T = c.T2, H = c.H, K = c.K, D = c.D;
  const std::vector<bf16_t> q = to_bf16(in.q), k = to_bf16(in.k), v = to_bf16(in.v);
  std::vector<float> out(in.q.size()), lse(B * H * T);
  attention_forward_bf16(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, K, D, in.mask, in.scale);
  const std::vector<bf16_t> out16 = to_bf16(out);
  std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  attention_backward_bf16(dq.data(), dk.data(), dv.data(), in.dout.data(), q.data(), k.data(), v.data(),
                          out16.data(), lse.data(), B, T, H, K, D, in.mask, in.scale, schedule);
  const Reference r = reference_of(c, in);
  EXPECT_LT(max_rel_error(lse, r.lse), 1e-3) << "lse";
  EXPECT_LT(max_rel_error(out, r.out), 4e-3) << "out";
  EXPECT_LT(max_rel_error(dq, r.dq), 1e-2) << "dq";
  EXPECT_LT(max_rel_error(dk, r.dk), 1e-2) << "dk";
  EXPECT_LT(max_rel_error(dv, r.dv), 1e-2) << "dv";
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {2, 8, 2, 2, 8, 2, false},       // tiny: 4 blocks of 2 in each half
      {1, 14, 4, 2, 16, 3, false},     // L' does not divide T
      {2, 64, 4, 1, 24, 4, true},      // one tile, documents, GQA 4:1
      {1, 128, 4, 2, 64, 16, false},   // the halves are whole tiles
      {1, 200, 2, 1, 32, 8, false},    // halves of 100: tiles straddle the halves
      {1, 256, 4, 2, 40, 64, false},   // blocks of a whole tile
      {1, 160, 2, 2, 16, 80, true},    // one block per half (bidirectional noised half)
  };
  return c;
}

}  // namespace

TEST(AttentionBlockDiffusion, Fp32MatchesDoubleReference) {
  uint64_t seed = 700;
  for (const Case& c : cases()) check_fp32(c, seed += 10);
}

TEST(AttentionBlockDiffusion, Bf16MatchesDoubleReference) {
  uint64_t seed = 900;
  for (const Case& c : cases())
    for (auto schedule : {AttentionBackwardSchedule::Fused, AttentionBackwardSchedule::TwoPass})
      check_bf16(c, seed += 10, schedule);
}

// Equal scores (q = 0) make each output the mean of the values its query sees; with v the key's index
// that mean is the mean index of the visible keys, which pins the mask to its definition row by row.
TEST(AttentionBlockDiffusion, EachQuerySeesExactlyItsKeys) {
  const int64_t half = 12, T = 2 * half, L = 4, D = 16;
  std::vector<float> q(T * D, 0.0f), k = random_vector(T * D, 3), v(T * D);
  for (int64_t j = 0; j < T; ++j)
    for (int64_t d = 0; d < D; ++d) v[j * D + d] = static_cast<float>(j);
  std::vector<float> out(T * D), lse(T);
  attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), 1, T, 1, 1, D,
                    AttentionMask{MaskType::BlockDiffusion, L, nullptr}, 1.0f);
  for (int64_t i = 0; i < T; ++i) {
    // Noised block b: its own block's noised keys and the clean keys of blocks < b; clean block b: the
    // clean keys of blocks <= b.
    const int64_t b = (i % half) / L;
    double sum = 0, n = 0;
    if (i < half) {
      for (int64_t j = b * L; j < (b + 1) * L; ++j) sum += static_cast<double>(j), ++n;
      for (int64_t j = half; j < half + b * L; ++j) sum += static_cast<double>(j), ++n;
    } else {
      for (int64_t j = half; j < half + (b + 1) * L; ++j) sum += static_cast<double>(j), ++n;
    }
    EXPECT_NEAR(out[i * D], sum / n, 1e-4) << "query " << i;
    EXPECT_NEAR(lse[i], std::log(n), 1e-5) << "query " << i;
  }
}

TEST(AttentionBlockDiffusion, RefusesOddLengthAndZeroBlock) {
  std::vector<float> x(7 * 8, 0.5f), out(7 * 8), lse(7);
  const std::string odd = test::error_of([&] {
    attention_forward(out.data(), lse.data(), x.data(), x.data(), x.data(), 1, 7, 1, 1, 8,
                      AttentionMask{MaskType::BlockDiffusion, 2, nullptr}, 1.0f);
  });
  EXPECT_NE(odd.find("even T"), std::string::npos) << odd;
  const std::string zero = test::error_of([&] {
    attention_forward(out.data(), lse.data(), x.data(), x.data(), x.data(), 1, 6, 1, 1, 8,
                      AttentionMask{MaskType::BlockDiffusion, 0, nullptr}, 1.0f);
  });
  EXPECT_NE(zero.find("block_size > 0"), std::string::npos) << zero;
}
