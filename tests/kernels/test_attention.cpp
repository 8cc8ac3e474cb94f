// Memory-efficient attention against an explicit double-precision masked softmax (the T x T scores are
// materialised here, in the test only), whose analytic gradient is itself checked by finite differences.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "test_util.h"

using namespace megadlm;
using namespace megadlm::cpu;
using megadlm::test::max_rel_error;
using megadlm::test::random_vector;

namespace {

constexpr double kNegInfD = -std::numeric_limits<double>::infinity();

struct Case {
  int64_t B, T, H, K, D;
  MaskType type;
  int64_t block;  // BlockCausal only
  bool segments;
};

std::string describe(const Case& c) {
  const char* names[] = {"None", "Causal", "BlockCausal"};
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) +
         " K=" + std::to_string(c.K) + " D=" + std::to_string(c.D) + " mask=" + names[static_cast<int>(c.type)] +
         (c.type == MaskType::BlockCausal ? "(" + std::to_string(c.block) + ")" : "") +
         (c.segments ? " +segments" : "");
}

bool visible_ref(MaskType type, int64_t block, const int32_t* seg, int64_t i, int64_t j) {
  bool ok = true;
  if (type == MaskType::Causal) ok = j <= i;
  if (type == MaskType::BlockCausal) ok = j / block <= i / block;
  return ok && (seg == nullptr || seg[i] == seg[j]);
}

// Documents of uneven lengths packed into each row (ids not sorted, to not rely on monotonic ids).
std::vector<int32_t> make_segments(int64_t B, int64_t T, uint64_t seed) {
  std::vector<float> r = random_vector(B * T, seed, 0.0f, 1.0f);
  std::vector<int32_t> seg(B * T);
  for (int64_t b = 0; b < B; ++b) {
    int32_t id = static_cast<int32_t>(7 * b + 3);
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0 && r[b * T + t] < 0.06f) id = (id * 5 + 11) % 97;  // a new document starts
      seg[b * T + t] = id;
    }
  }
  return seg;
}

// Double-precision reference: explicit scores, masked softmax, and the analytic backward.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout, const int32_t* seg_all,
                    double scale, bool backward) {
  const int64_t B = c.B, T = c.T, H = c.H, K = c.K, D = c.D, G = H / K;
  Reference r;
  r.out.assign(B * T * H * D, 0.0);
  r.lse.assign(B * H * T, kNegInfD);
  if (backward) {
    r.dq.assign(B * T * H * D, 0.0);
    r.dk.assign(B * T * K * D, 0.0);
    r.dv.assign(B * T * K * D, 0.0);
  }
  std::vector<double> p(T * T), dp(T * T);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* seg = seg_all ? seg_all + b * T : nullptr;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / G;
      auto Q = [&](int64_t i, int64_t d) { return q[((b * T + i) * H + h) * D + d]; };
      auto Kx = [&](int64_t j, int64_t d) { return k[((b * T + j) * K + g) * D + d]; };
      auto V = [&](int64_t j, int64_t d) { return v[((b * T + j) * K + g) * D + d]; };
      for (int64_t i = 0; i < T; ++i) {
        double mx = kNegInfD;
        for (int64_t j = 0; j < T; ++j) {
          double s = kNegInfD;
          if (visible_ref(c.type, c.block, seg, i, j)) {
            s = 0;
            for (int64_t d = 0; d < D; ++d) s += Q(i, d) * Kx(j, d);
            s *= scale;
          }
          p[i * T + j] = s;
          mx = std::fmax(mx, s);
        }
        if (mx == kNegInfD) {  // no visible key: p = 0, out = 0, lse = -inf
          for (int64_t j = 0; j < T; ++j) p[i * T + j] = 0;
          continue;
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
      }
      if (!backward) continue;
      auto dO = [&](int64_t i, int64_t d) { return dout[((b * T + i) * H + h) * D + d]; };
      for (int64_t i = 0; i < T; ++i) {
        double rowdot = 0;  // sum_j p_ij dp_ij
        for (int64_t j = 0; j < T; ++j) {
          double x = 0;
          for (int64_t d = 0; d < D; ++d) x += dO(i, d) * V(j, d);
          dp[i * T + j] = x;
          rowdot += p[i * T + j] * x;
        }
        for (int64_t j = 0; j < T; ++j) {
          const double pij = p[i * T + j];
          const double ds = pij * (dp[i * T + j] - rowdot) * scale;  // d loss / d (q_i . k_j)
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

// Runs the kernels on NaN-poisoned outputs and compares everything with the double reference.
void check_case(const Case& c, uint64_t seed, double q_amp = 1.0, float scale = 0.0f) {
  SCOPED_TRACE(describe(c));
  const int64_t B = c.B, T = c.T, H = c.H, K = c.K, D = c.D;
  std::vector<float> q = random_vector(B * T * H * D, seed, -q_amp, q_amp);
  std::vector<float> k = random_vector(B * T * K * D, seed + 1, -1.5f, 1.5f);
  std::vector<float> v = random_vector(B * T * K * D, seed + 2);
  std::vector<float> dout = random_vector(B * T * H * D, seed + 3);
  std::vector<int32_t> seg = c.segments ? make_segments(B, T, seed + 4) : std::vector<int32_t>();
  AttentionMask mask{c.type, c.block, c.segments ? seg.data() : nullptr};
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(D));

  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(B * T * H * D, nan), lse(B * H * T, nan);
  attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, K, D, mask, scale);
  std::vector<float> dq(q.size(), nan), dk(k.size(), nan), dv(v.size(), nan);
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                     lse.data(), B, T, H, K, D, mask, scale);

  // The reference sees the same fp32 inputs, held in double.
  const Reference r = reference(c, test::to_double(q), test::to_double(k), test::to_double(v),
                                test::to_double(dout), c.segments ? seg.data() : nullptr, scale, true);
  // Every query sees at least itself under these masks, so lse is finite everywhere.
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_TRUE(std::isfinite(r.lse[i]));
    ASSERT_NEAR(lse[i], r.lse[i], 2e-5 * (1.0 + std::fabs(r.lse[i]))) << "lse[" << i << "]";
  }
  EXPECT_LT(max_rel_error(out, r.out), 2e-5) << "out";
  EXPECT_LT(max_rel_error(dq, r.dq), 3e-5) << "dq";
  EXPECT_LT(max_rel_error(dk, r.dk), 3e-5) << "dk";
  EXPECT_LT(max_rel_error(dv, r.dv), 3e-5) << "dv";
}

}  // namespace

// The reference's analytic gradient against central differences, in double, on a tiny GQA case with a
// causal mask and two documents: the anchor every other comparison rests on.
TEST(AttentionReference, AnalyticGradientMatchesFiniteDifferences) {
  for (MaskType type : {MaskType::None, MaskType::Causal, MaskType::BlockCausal}) {
    const Case c{1, 5, 4, 2, 3, type, 2, true};
    SCOPED_TRACE(describe(c));
    const int64_t n_q = c.B * c.T * c.H * c.D, n_kv = c.B * c.T * c.K * c.D;
    std::vector<double> q = test::to_double(random_vector(n_q, 11, -2, 2));
    std::vector<double> k = test::to_double(random_vector(n_kv, 12, -2, 2));
    std::vector<double> v = test::to_double(random_vector(n_kv, 13));
    const std::vector<double> w = test::to_double(random_vector(n_q, 14));  // loss = sum(w * out)
    const std::vector<int32_t> seg = {4, 4, 4, 9, 9};
    const double scale = 0.7;
    auto loss = [&]() {
      const Reference r = reference(c, q, k, v, w, seg.data(), scale, false);
      double s = 0;
      for (int64_t i = 0; i < n_q; ++i) s += w[i] * r.out[i];
      return s;
    };
    const Reference r = reference(c, q, k, v, w, seg.data(), scale, true);
    const std::vector<double> nq = test::numerical_gradient(q, loss, 1e-6);
    const std::vector<double> nk = test::numerical_gradient(k, loss, 1e-6);
    const std::vector<double> nv = test::numerical_gradient(v, loss, 1e-6);
    for (int64_t i = 0; i < n_q; ++i) EXPECT_NEAR(r.dq[i], nq[i], 1e-8) << "dq[" << i << "]";
    for (int64_t i = 0; i < n_kv; ++i) EXPECT_NEAR(r.dk[i], nk[i], 1e-8) << "dk[" << i << "]";
    for (int64_t i = 0; i < n_kv; ++i) EXPECT_NEAR(r.dv[i], nv[i], 1e-8) << "dv[" << i << "]";
  }
}

// Sizes that are not tile multiples, head dims that are and are not multiples of 16, GQA ratios 1, 2, 4,
// every mask type with and without packed documents, block sizes that do not divide T.
TEST(Attention, MatchesDoubleReferenceAcrossShapesAndMasks) {
  const int64_t Ts[] = {1, 7, 33, 100};
  const int64_t Ds[] = {8, 64, 24};
  const int64_t HKs[][2] = {{2, 2}, {4, 2}, {4, 1}};
  uint64_t seed = 100;
  for (int64_t T : Ts)
    for (int64_t D : Ds)
      for (const auto& hk : HKs)
        for (MaskType type : {MaskType::None, MaskType::Causal, MaskType::BlockCausal})
          for (bool segments : {false, true}) {
            const int64_t block = T >= 33 ? 24 : 3;  // never divides T
            check_case({2, T, hk[0], hk[1], D, type, block, segments}, seed += 10);
          }
}

// Several tiles in each direction (full, partial and skipped tiles, documents longer than a tile and
// documents straddling tile borders), block sizes larger than, equal to and smaller than a tile, and a
// head dim above 64 (two column panels).
TEST(Attention, MatchesDoubleReferenceOverManyTiles) {
  uint64_t seed = 5000;
  check_case({1, 300, 4, 2, 64, MaskType::None, 0, false}, seed += 10);
  check_case({1, 300, 4, 2, 64, MaskType::Causal, 0, false}, seed += 10);
  check_case({1, 300, 2, 1, 40, MaskType::Causal, 0, true}, seed += 10);
  check_case({1, 257, 2, 2, 80, MaskType::BlockCausal, 100, false}, seed += 10);
  check_case({1, 257, 4, 1, 16, MaskType::BlockCausal, 64, true}, seed += 10);
  check_case({2, 200, 2, 1, 128, MaskType::BlockCausal, 5, false}, seed += 10);
  check_case({1, 200, 2, 2, 96, MaskType::None, 0, true}, seed += 10);
}

// Long uniform documents make whole tiles "Full" under the segment mask, so the tile classification is
// exercised on its fast path too.
TEST(Attention, LongDocumentsUseWholeTiles) {
  const Case c{1, 320, 2, 1, 32, MaskType::Causal, 0, false};
  std::vector<float> q = random_vector(c.T * c.H * c.D, 1), k = random_vector(c.T * c.K * c.D, 2);
  std::vector<float> v = random_vector(c.T * c.K * c.D, 3), dout = random_vector(c.T * c.H * c.D, 4);
  std::vector<int32_t> seg(c.T);
  for (int64_t t = 0; t < c.T; ++t) seg[t] = t < 192 ? 1 : (t < 200 ? 2 : 3);  // 3 documents
  for (MaskType type : {MaskType::None, MaskType::Causal}) {
    Case cc = c;
    cc.type = type;
    SCOPED_TRACE(describe(cc));
    AttentionMask mask{type, 0, seg.data()};
    const float scale = 0.125f;
    std::vector<float> out(q.size()), lse(c.T * c.H), dq(q.size()), dk(k.size()), dv(v.size());
    attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), 1, c.T, c.H, c.K, c.D, mask, scale);
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                       lse.data(), 1, c.T, c.H, c.K, c.D, mask, scale);
    const Reference r = reference(cc, test::to_double(q), test::to_double(k), test::to_double(v),
                                  test::to_double(dout), seg.data(), scale, true);
    EXPECT_LT(max_rel_error(out, r.out), 2e-5);
    EXPECT_LT(max_rel_error(dq, r.dq), 3e-5);
    EXPECT_LT(max_rel_error(dk, r.dk), 3e-5);
    EXPECT_LT(max_rel_error(dv, r.dv), 3e-5);
  }
}

// Large scores (peaked softmax, running max changing a lot between key tiles) stay finite and accurate.
TEST(Attention, StableWithLargeScores) {
  check_case({1, 150, 2, 1, 32, MaskType::None, 0, false}, 7000, 40.0);
  check_case({1, 150, 2, 2, 32, MaskType::Causal, 0, true}, 7010, 40.0);
}

// Nothing assumes a positive scale: masking happens after scaling, so a negative one works too.
TEST(Attention, NegativeScale) {
  check_case({1, 90, 2, 1, 24, MaskType::Causal, 0, true}, 7100, 1.0, -0.4f);
  check_case({1, 90, 2, 2, 16, MaskType::BlockCausal, 7, false}, 7110, 1.0, -0.4f);
}

// Each output element is computed by one task in a fixed order: 1 and 2 threads agree bit for bit.
TEST(Attention, BitwiseIdenticalForOneAndTwoThreads) {
  const int64_t B = 2, T = 200, H = 4, K = 2, D = 40;
  std::vector<float> q = random_vector(B * T * H * D, 21), k = random_vector(B * T * K * D, 22);
  std::vector<float> v = random_vector(B * T * K * D, 23), dout = random_vector(B * T * H * D, 24);
  std::vector<int32_t> seg = make_segments(B, T, 25);
  for (MaskType type : {MaskType::None, MaskType::Causal, MaskType::BlockCausal}) {
    AttentionMask mask{type, 48, seg.data()};
    std::vector<float> res[2][5];
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      auto& r = res[threads - 1];
      r[0].assign(q.size(), 0), r[1].assign(B * H * T, 0), r[2].assign(q.size(), 0);
      r[3].assign(k.size(), 0), r[4].assign(v.size(), 0);
      attention_forward(r[0].data(), r[1].data(), q.data(), k.data(), v.data(), B, T, H, K, D, mask, 0.15f);
      attention_backward(r[2].data(), r[3].data(), r[4].data(), dout.data(), q.data(), k.data(), v.data(),
                         r[0].data(), r[1].data(), B, T, H, K, D, mask, 0.15f);
    }
    omp_set_num_threads(2);
    for (int t = 0; t < 5; ++t) {
      ASSERT_EQ(res[0][t].size(), res[1][t].size());
      EXPECT_EQ(0, std::memcmp(res[0][t].data(), res[1][t].data(), res[0][t].size() * sizeof(float)))
          << "output " << t << " differs between 1 and 2 threads, mask " << static_cast<int>(type);
    }
  }
}

// Block size 1 is the causal mask and a block of T or more keys (even a huge one) is no mask at all.
TEST(Attention, BlockCausalLimitsMatchCausalAndNone) {
  const int64_t T = 130, H = 2, K = 1, D = 16;
  std::vector<float> q = random_vector(T * H * D, 31), k = random_vector(T * K * D, 32);
  std::vector<float> v = random_vector(T * K * D, 33);
  auto run = [&](AttentionMask mask) {
    std::vector<float> out(q.size()), lse(H * T);
    attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), 1, T, H, K, D, mask, 0.25f);
    return out;
  };
  EXPECT_EQ(run({MaskType::BlockCausal, 1, nullptr}), run({MaskType::Causal, 0, nullptr}));
  const std::vector<float> none = run({MaskType::None, 0, nullptr});
  EXPECT_EQ(run({MaskType::BlockCausal, T, nullptr}), none);
  EXPECT_EQ(run({MaskType::BlockCausal, int64_t{1} << 62, nullptr}), none);
}

TEST(Attention, RejectsBadArguments) {
  std::vector<float> buf(4096, 0.0f);
  float* p = buf.data();
  AttentionMask causal{MaskType::Causal, 0, nullptr};
  EXPECT_THROW(attention_forward(p, p, p, p, p, 1, 4, 3, 2, 8, causal, 1.0f), Error);  // H % K != 0
  AttentionMask bad_block{MaskType::BlockCausal, 0, nullptr};
  EXPECT_THROW(attention_forward(p, p, p, p, p, 1, 4, 2, 2, 8, bad_block, 1.0f), Error);
  EXPECT_THROW(attention_backward(p, p, p, p, p, p, p, p, p, 1, 4, 2, 2, 0, causal, 1.0f), Error);  // D = 0
}
