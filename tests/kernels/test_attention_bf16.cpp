// Attention with bf16 operands against a double-precision masked softmax computed from the same
// bf16-rounded inputs (the T x T matrices are materialised here, in the test only), against the fp32
// kernel, and for thread-count independence.
//
// Tolerances: the kernel rounds P, dS and dO to bf16 (relative error up to 2^-9 = 2e-3 each, random in
// sign) before products accumulated in fp32, so errors relative to the largest reference value stay
// around 1e-3 (out) and a few 1e-3 (gradients, where dS = P (dP - delta) also loses bits to the
// cancellation in dP - delta). The limits below (4e-3 out, 1e-2 gradients, 1e-3 on lse, which the
// kernel meets to ~3e-7) leave about 2x margin over the largest errors of the sweep (2.0e-3 out, 4.3e-3
// gradients, printed by it), while real bugs land far above them: scores scaled 1% off give out errors
// ~8e-3 and lse ~7e-3; a dq without its scale, an unmasked dk/dv tile or the wrong row's lse in the
// dk/dv pass give gradient errors of 0.05 to 10 (each tried).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_bf16.h"
#include "test_util.h"

using namespace megadlm;
using namespace megadlm::cpu;
using megadlm::test::max_rel_error;
using megadlm::test::random_vector;

namespace {

constexpr double kOutTol = 4e-3, kGradTol = 1e-2, kLseTol = 1e-3;

struct Shape5 {
  int64_t B, T, H, K, D;
};

struct MaskSpec {
  MaskType type;
  int64_t block;  // BlockCausal only
  bool segments;
};

std::string describe(const Shape5& s, const MaskSpec& m) {
  const char* names[] = {"None", "Causal", "BlockCausal"};
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " K=" + std::to_string(s.K) + " D=" + std::to_string(s.D) + " mask=" + names[static_cast<int>(m.type)] +
         (m.type == MaskType::BlockCausal ? "(" + std::to_string(m.block) + ")" : "") +
         (m.segments ? " +segments" : "");
}

// Random values rounded to bf16: the kernel's operand and the same numbers widened (exactly) to fp32.
struct Bf16Input {
  std::vector<bf16_t> bits;
  std::vector<float> wide;
};

Bf16Input random_bf16(int64_t n, uint64_t seed, float amp) {
  Bf16Input x{std::vector<bf16_t>(n), std::vector<float>(n)};
  const std::vector<float> r = random_vector(n, seed, -amp, amp);
  for (int64_t i = 0; i < n; ++i) {
    x.bits[i].bits = f32_to_bf16(r[i]);
    x.wide[i] = bf16_to_f32(x.bits[i].bits);
  }
  return x;
}

std::vector<bf16_t> round_bf16(const std::vector<float>& x) {
  std::vector<bf16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i].bits = f32_to_bf16(x[i]);
  return y;
}

// Documents of 1 to ~30 tokens packed in each row, ids reused out of order.
std::vector<int32_t> segments(int64_t B, int64_t T, uint64_t seed) {
  const std::vector<float> r = random_vector(B * T, seed, 0.0f, 1.0f);
  std::vector<int32_t> seg(B * T);
  for (int64_t b = 0; b < B; ++b) {
    int32_t id = static_cast<int32_t>(3 + b);
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0 && r[b * T + t] < 0.07f) id = (id * 7 + 5) % 31;
      seg[b * T + t] = id;
    }
  }
  return seg;
}

bool sees(const MaskSpec& m, const int32_t* seg, int64_t i, int64_t j) {
  const bool pos = m.type == MaskType::Causal        ? j <= i
                   : m.type == MaskType::BlockCausal ? j / m.block <= i / m.block
                                                     : true;
  return pos && (seg == nullptr || seg[i] == seg[j]);
}

// The problem: bf16 q, k, v, fp32 dout, mask.
struct Problem {
  Shape5 s;
  MaskSpec m;
  float scale;
  Bf16Input q, k, v;
  std::vector<float> dout;
  std::vector<int32_t> seg;
  AttentionMask mask() const { return {m.type, m.block, m.segments ? seg.data() : nullptr}; }
};

Problem make_problem(const Shape5& s, const MaskSpec& m, uint64_t seed, float q_amp = 1.0f) {
  Problem p{s, m, 1.0f / std::sqrt(static_cast<float>(s.D)), random_bf16(s.B * s.T * s.H * s.D, seed, q_amp),
            random_bf16(s.B * s.T * s.K * s.D, seed + 1, 1.5f), random_bf16(s.B * s.T * s.K * s.D, seed + 2, 1.0f),
            random_vector(s.B * s.T * s.H * s.D, seed + 3), {}};
  if (m.segments) p.seg = segments(s.B, s.T, seed + 4);
  return p;
}

// Exact attention in double, one (b, h) at a time, as matrices: S = scale Q K^T masked, P = softmax(S),
// out = P V; dP = dO V^T, dS = P (dP - rowsum(P dP)), dq = scale dS K, dk += scale dS^T Q, dv += P^T dO.
struct Exact {
  std::vector<double> out, lse, dq, dk, dv;
};

Exact exact(const Problem& p) {
  const auto [B, T, H, K, D] = p.s;
  Exact r{std::vector<double>(B * T * H * D, 0.0), std::vector<double>(B * H * T, 0.0),
          std::vector<double>(B * T * H * D, 0.0), std::vector<double>(B * T * K * D, 0.0),
          std::vector<double>(B * T * K * D, 0.0)};
  std::vector<double> P(T * T), dS(T * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / K);
      const int32_t* seg = p.m.segments ? p.seg.data() + b * T : nullptr;
      auto qi = [&](int64_t t) { return ((b * T + t) * H + h) * D; };  // row offsets
      auto kj = [&](int64_t t) { return ((b * T + t) * K + g) * D; };
      for (int64_t i = 0; i < T; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double sij = -std::numeric_limits<double>::infinity();
          if (sees(p.m, seg, i, j)) {
            sij = 0;
            for (int64_t d = 0; d < D; ++d) sij += double(p.q.wide[qi(i) + d]) * p.k.wide[kj(j) + d];
            sij *= p.scale;
          }
          P[i * T + j] = sij;
          mx = std::max(mx, sij);
        }
        double z = 0;
        for (int64_t j = 0; j < T; ++j) z += P[i * T + j] = std::exp(P[i * T + j] - mx);
        for (int64_t j = 0; j < T; ++j) P[i * T + j] /= z;
        r.lse[(b * H + h) * T + i] = mx + std::log(z);
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < D; ++d) r.out[qi(i) + d] += P[i * T + j] * p.v.wide[kj(j) + d];
        // backward, row i
        double rowsum = 0;
        for (int64_t j = 0; j < T; ++j) {
          double dpij = 0;
          for (int64_t d = 0; d < D; ++d) dpij += double(p.dout[qi(i) + d]) * p.v.wide[kj(j) + d];
          dS[i * T + j] = dpij;
          rowsum += P[i * T + j] * dpij;
        }
        for (int64_t j = 0; j < T; ++j) dS[i * T + j] = P[i * T + j] * (dS[i * T + j] - rowsum) * p.scale;
      }
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const double pij = P[i * T + j], dsij = dS[i * T + j];
          if (pij == 0.0) continue;
          for (int64_t d = 0; d < D; ++d) {
            r.dq[qi(i) + d] += dsij * p.k.wide[kj(j) + d];
            r.dk[kj(j) + d] += dsij * p.q.wide[qi(i) + d];
            r.dv[kj(j) + d] += pij * p.dout[qi(i) + d];
          }
        }
    }
  return r;
}

// The kernel's outputs, NaN-poisoned first so that an unwritten element fails.
struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

Result run_bf16(const Problem& p, AttentionBackwardSchedule schedule = AttentionBackwardSchedule::Auto) {
  const auto [B, T, H, K, D] = p.s;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Result r{std::vector<float>(B * T * H * D, nan), std::vector<float>(B * H * T, nan),
           std::vector<float>(B * T * H * D, nan), std::vector<float>(B * T * K * D, nan),
           std::vector<float>(B * T * K * D, nan)};
  const AttentionMask mask = p.mask();
  attention_forward_bf16(r.out.data(), r.lse.data(), p.q.bits.data(), p.k.bits.data(), p.v.bits.data(), B, T, H, K,
                         D, mask, p.scale);
  const std::vector<bf16_t> out16 = round_bf16(r.out);  // what a bf16 trainer saves
  attention_backward_bf16(r.dq.data(), r.dk.data(), r.dv.data(), p.dout.data(), p.q.bits.data(), p.k.bits.data(),
                          p.v.bits.data(), out16.data(), r.lse.data(), B, T, H, K, D, mask, p.scale, schedule);
  return r;
}

Result run_fp32(const Problem& p) {
  const auto [B, T, H, K, D] = p.s;
  Result r{std::vector<float>(B * T * H * D), std::vector<float>(B * H * T), std::vector<float>(B * T * H * D),
           std::vector<float>(B * T * K * D), std::vector<float>(B * T * K * D)};
  const AttentionMask mask = p.mask();
  attention_forward(r.out.data(), r.lse.data(), p.q.wide.data(), p.k.wide.data(), p.v.wide.data(), B, T, H, K, D,
                    mask, p.scale);
  attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), p.dout.data(), p.q.wide.data(), p.k.wide.data(),
                     p.v.wide.data(), r.out.data(), r.lse.data(), B, T, H, K, D, mask, p.scale);
  return r;
}

double max_lse_error(const std::vector<float>& lse, const std::vector<double>& ref) {
  double e = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(lse[i] - ref[i]) / (1.0 + std::fabs(ref[i]));
    if (!(d <= e)) e = d;  // NaN propagates
  }
  return e;
}

// Largest errors seen, printed at the end of the sweep so that the margins can be judged.
struct Worst {
  double out = 0, lse = 0, grad = 0;
};

// The tile products this machine can run: AVX512-BF16's vdpbf16ps always, AMX tiles where available
// (kernels/cpu/amx.h; the kernel takes them for head dims that are multiples of 32).
std::vector<bool> tile_paths() {
  std::vector<bool> paths{false};
  if (amx::available()) paths.push_back(true);
  return paths;
}

// AMX tile products on or off for the lifetime of the object.
class TilesOn {
 public:
  explicit TilesOn(bool on) : previous_(amx::set_enabled(on)) {}
  ~TilesOn() { amx::set_enabled(previous_); }
  TilesOn(const TilesOn&) = delete;
  TilesOn& operator=(const TilesOn&) = delete;

 private:
  bool previous_;
};

// Both backward schedules are checked (their bitwise agreement is a test of its own), with each product
// path of the machine.
void check_against_exact(const Problem& p, Worst* worst = nullptr) {
  SCOPED_TRACE(describe(p.s, p.m));
  const Exact x = exact(p);
  for (bool amx_tiles : tile_paths()) {
    for (AttentionBackwardSchedule schedule : {AttentionBackwardSchedule::Fused, AttentionBackwardSchedule::TwoPass}) {
      const TilesOn tiles(amx_tiles);
      SCOPED_TRACE(amx_tiles ? "AMX tile products" : "AVX512-BF16 products");
      SCOPED_TRACE(schedule == AttentionBackwardSchedule::Fused ? "fused backward" : "two-pass backward");
      const Result r = run_bf16(p, schedule);
      const double e_out = max_rel_error(r.out, x.out), e_lse = max_lse_error(r.lse, x.lse);
      const double e_dq = max_rel_error(r.dq, x.dq), e_dk = max_rel_error(r.dk, x.dk), e_dv = max_rel_error(r.dv, x.dv);
      EXPECT_LT(e_out, kOutTol) << "out";
      EXPECT_LT(e_lse, kLseTol) << "lse";
      EXPECT_LT(e_dq, kGradTol) << "dq";
      EXPECT_LT(e_dk, kGradTol) << "dk";
      EXPECT_LT(e_dv, kGradTol) << "dv";
      if (worst) {
        worst->out = std::max(worst->out, e_out);
        worst->lse = std::max(worst->lse, e_lse);
        worst->grad = std::max({worst->grad, e_dq, e_dk, e_dv});
      }
    }
  }
}

}  // namespace

TEST(AttentionBf16, UsesNativeProductsWhenCompiledForThem) {
#if defined(__AVX512BF16__)
  EXPECT_TRUE(attention_bf16_native());
#else
  EXPECT_FALSE(attention_bf16_native());
#endif
}

// Sequence lengths below, across and just past tile borders (odd last key / query tiles, whose pairs
// are completed with zeros), head dims 64, 40 and 72 (not multiples of 32, 72 spans two column panels)
// and 25 (odd: padded pairs), GQA 2:1 and 4:1 and none, every mask with and without documents.
TEST(AttentionBf16, MatchesExactAttentionAcrossShapesAndMasks) {
  const int64_t Ts[] = {1, 7, 65, 130};
  const int64_t Ds[] = {64, 40, 72, 25};
  const int64_t HKs[][2] = {{4, 2}, {2, 2}, {4, 1}};
  const MaskSpec masks[] = {{MaskType::None, 0, false},        {MaskType::Causal, 0, false},
                            {MaskType::BlockCausal, 24, false}, {MaskType::None, 0, true},
                            {MaskType::Causal, 0, true},        {MaskType::BlockCausal, 24, true}};
  Worst worst;
  uint64_t seed = 9000;
  int n = 0;
  for (int64_t T : Ts)
    for (int64_t D : Ds)
      for (const MaskSpec& m : masks) {
        const auto& hk = HKs[(n / 6 + n) % 3];  // every mask meets every GQA ratio over the sweep
        ++n;
        MaskSpec mm = m;
        if (mm.type == MaskType::BlockCausal && T < 24) mm.block = 3;
        if (T == 1 && m.segments) continue;  // one token: documents change nothing
        check_against_exact(make_problem({2, T, hk[0], hk[1], D}, mm, seed += 10), &worst);
      }
  std::printf("worst errors: out %.2e  lse %.2e  grads %.2e (limits %.0e, %.0e, %.0e)\n", worst.out, worst.lse,
              worst.grad, kOutTol, kLseTol, kGradTol);
}

// Head dims of two and four column panels (128, 256), one of them with a tail (136).
TEST(AttentionBf16, WideHeads) {
  check_against_exact(make_problem({1, 100, 2, 1, 128}, {MaskType::Causal, 0, true}, 7200));
  check_against_exact(make_problem({1, 70, 2, 2, 256}, {MaskType::None, 0, false}, 7210));
  check_against_exact(make_problem({2, 80, 2, 1, 136}, {MaskType::BlockCausal, 16, false}, 7220));
}

// Peaked softmax (scores up to ~40): the running max moves between key tiles, P is near 0 or 1.
TEST(AttentionBf16, StableWithLargeScores) {
  check_against_exact(make_problem({1, 150, 2, 1, 32}, {MaskType::None, 0, false}, 7000, 40.0f));
  check_against_exact(make_problem({1, 150, 2, 2, 64}, {MaskType::Causal, 0, true}, 7010, 40.0f));
}

// Nothing assumes a positive scale.
TEST(AttentionBf16, NegativeScale) {
  Problem p = make_problem({1, 90, 2, 1, 40}, {MaskType::Causal, 0, true}, 7100);
  p.scale = -0.4f;
  check_against_exact(p);
}

// The bf16 kernel and the fp32 kernel on the same (bf16-valued) inputs differ only by the roundings of
// P, dS and dO.
TEST(AttentionBf16, CloseToFp32Kernel) {
  for (const MaskSpec& m : {MaskSpec{MaskType::None, 0, false}, MaskSpec{MaskType::Causal, 0, true},
                            MaskSpec{MaskType::BlockCausal, 48, false}}) {
    const Problem p = make_problem({2, 200, 4, 2, 64}, m, 8000 + static_cast<int>(m.type));
    SCOPED_TRACE(describe(p.s, p.m));
    const Result a = run_bf16(p), f = run_fp32(p);
    EXPECT_LT(max_rel_error(a.out, test::to_double(f.out)), kOutTol);
    EXPECT_LT(max_lse_error(a.lse, test::to_double(f.lse)), kLseTol);
    EXPECT_LT(max_rel_error(a.dq, test::to_double(f.dq)), kGradTol);
    EXPECT_LT(max_rel_error(a.dk, test::to_double(f.dk)), kGradTol);
    EXPECT_LT(max_rel_error(a.dv, test::to_double(f.dv)), kGradTol);
  }
}

// Large enough for an OpenMP team (B*H*T*T*D >= 2^22); every output element is computed by one task in
// a fixed order, so 1 and 2 threads agree bit for bit (odd D included: its padded copies are parallel).
TEST(AttentionBf16, BitwiseIdenticalForOneAndTwoThreads) {
  for (bool amx_tiles : tile_paths()) {
    for (int64_t D : {40, 33, 64}) {
      for (const MaskSpec& m : {MaskSpec{MaskType::None, 0, true}, MaskSpec{MaskType::Causal, 0, true},
                                MaskSpec{MaskType::BlockCausal, 48, true}}) {
        const TilesOn tiles(amx_tiles);
        const Problem p = make_problem({2, 200, 4, 2, D}, m, 8100 + D);
        SCOPED_TRACE(describe(p.s, p.m) + (amx_tiles ? " AMX" : " AVX512-BF16"));
        omp_set_num_threads(1);
        const Result one = run_bf16(p);
        omp_set_num_threads(2);
        const Result two = run_bf16(p);
        auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
          return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        };
        EXPECT_TRUE(same(one.out, two.out)) << "out";
        EXPECT_TRUE(same(one.lse, two.lse)) << "lse";
        EXPECT_TRUE(same(one.dq, two.dq)) << "dq";
        EXPECT_TRUE(same(one.dk, two.dk)) << "dk";
        EXPECT_TRUE(same(one.dv, two.dv)) << "dv";
      }
    }
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The fused backward sums the same bf16 operands in the same order as the two passes: bitwise equal,
// over tile borders, odd head dims, GQA and every mask, with one thread and with a team.
TEST(AttentionBf16, FusedBackwardIsBitwiseTheTwoPasses) {
  const Shape5 shapes[] = {{2, 130, 4, 2, 64}, {1, 65, 4, 1, 25}, {3, 200, 2, 2, 40}, {2, 7, 2, 1, 72}};
  const MaskSpec masks[] = {{MaskType::None, 0, false}, {MaskType::Causal, 0, true}, {MaskType::BlockCausal, 24, true}};
  for (bool amx_tiles : tile_paths()) {
    const TilesOn tiles(amx_tiles);
    uint64_t seed = 8300;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (const Shape5& sh : shapes)
        for (const MaskSpec& m : masks) {
          const Problem p = make_problem(sh, m, seed += 10);
          SCOPED_TRACE(describe(p.s, p.m) + " threads " + std::to_string(threads) + (amx_tiles ? " AMX" : ""));
          const Result fused = run_bf16(p, AttentionBackwardSchedule::Fused);
          const Result two = run_bf16(p, AttentionBackwardSchedule::TwoPass);
          EXPECT_TRUE(same_bits(fused.dq, two.dq)) << "dq";
          EXPECT_TRUE(same_bits(fused.dk, two.dk)) << "dk";
          EXPECT_TRUE(same_bits(fused.dv, two.dv)) << "dv";
          // A check that cannot pass by accident: the gradients are finite and not all zero.
          EXPECT_GT(max_rel_error(fused.dk, std::vector<double>(fused.dk.size(), 0.0)), 0.0);
        }
    }
  }
  omp_set_num_threads(2);
}

// Where the machine has AMX, a head dim that is a multiple of 32 takes the tile products: their sums round
// differently from vdpbf16ps's, so the bits change (the switch is honoured), within the bf16 kernel's
// tolerances of each other; a head dim of 40 keeps vdpbf16ps either way (bitwise the same).
TEST(AttentionBf16, AmxTilesWhereAvailable) {
  if (!amx::available()) GTEST_SKIP() << "no AMX-BF16 here (CPU, build or OS permission): one product path only";
  auto run_with = [](const Problem& p, bool amx_tiles) {
    const TilesOn tiles(amx_tiles);
    return run_bf16(p);
  };
  const Problem p = make_problem({2, 130, 4, 2, 64}, {MaskType::Causal, 0, true}, 8500);
  const Result with_avx = run_with(p, false), with_amx = run_with(p, true);
  EXPECT_FALSE(same_bits(with_avx.out, with_amx.out));
  EXPECT_FALSE(same_bits(with_avx.dq, with_amx.dq));
  EXPECT_FALSE(same_bits(with_avx.dk, with_amx.dk));
  EXPECT_FALSE(same_bits(with_avx.dv, with_amx.dv));
  EXPECT_LT(max_rel_error(with_amx.out, test::to_double(with_avx.out)), kOutTol);
  EXPECT_LT(max_rel_error(with_amx.dq, test::to_double(with_avx.dq)), kGradTol);
  EXPECT_LT(max_rel_error(with_amx.dk, test::to_double(with_avx.dk)), kGradTol);
  EXPECT_LT(max_rel_error(with_amx.dv, test::to_double(with_avx.dv)), kGradTol);

  const Problem q = make_problem({1, 70, 2, 1, 40}, {MaskType::None, 0, false}, 8510);
  const Result a = run_with(q, false), b = run_with(q, true);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.dq, b.dq));
}

TEST(AttentionBf16, RejectsBadArguments) {
  std::vector<float> f(4096, 0.0f);
  std::vector<bf16_t> h(4096, bf16_t{0});
  float* p = f.data();
  const bf16_t* x = h.data();
  const AttentionMask causal{MaskType::Causal, 0, nullptr};
  EXPECT_THROW(attention_forward_bf16(p, p, x, x, x, 1, 4, 3, 2, 8, causal, 1.0f), Error);  // H % K != 0
  EXPECT_THROW(attention_forward_bf16(p, p, x, x, x, 1, 4, 2, 2, 8, {MaskType::BlockCausal, 0, nullptr}, 1.0f),
               Error);  // block size 0
  EXPECT_THROW(attention_backward_bf16(p, p, p, p, x, x, x, x, p, 1, 4, 2, 2, 0, causal, 1.0f), Error);  // D = 0
  // Empty batches or sequences are valid and write nothing.
  EXPECT_NO_THROW(attention_forward_bf16(p, p, x, x, x, 0, 4, 2, 2, 8, causal, 1.0f));
  EXPECT_NO_THROW(attention_backward_bf16(p, p, p, p, x, x, x, x, p, 2, 0, 2, 2, 8, causal, 1.0f));
}
