// Fused softmax cross-entropy against a double-precision reference (whose gradient is checked by
// central differences): awkward shapes, ignore_index rows, per-token weights, grad_scale, in-place
// dlogits, forward-only calls, logits of magnitude 1e4, the padded GPT-2 vocabulary V = 50304,
// bitwise thread-count independence, and targets outside the vocabulary.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/cross_entropy.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::numerical_gradient;
using megadlm::test::random_vector;
using megadlm::test::to_double;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kIgnore = -100;

struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int n) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

struct CeRef {
  std::vector<double> losses, dlogits;
  double total = 0.0;
};

// losses[n] = w (logsumexp - x_t), dlogits = grad_scale w (softmax - onehot); ignored rows are zero.
CeRef ce_ref(const std::vector<double>& x, const std::vector<int32_t>& targets, const std::vector<float>& weights,
             double grad_scale, int64_t N, int64_t V) {
  CeRef r;
  r.losses.assign(N, 0.0);
  r.dlogits.assign(N * V, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == kIgnore) continue;
    const double w = weights.empty() ? 1.0 : weights[n];
    const double* row = &x[n * V];
    double m = row[0];
    for (int64_t v = 1; v < V; ++v) m = std::fmax(m, row[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - m);
    r.losses[n] = w * (m + std::log(sum) - row[targets[n]]);
    r.total += r.losses[n];
    for (int64_t v = 0; v < V; ++v)
      r.dlogits[n * V + v] = grad_scale * w * (std::exp(row[v] - m) / sum - (v == targets[n] ? 1.0 : 0.0));
  }
  return r;
}

// Targets in [0, V) with every third row ignored.
std::vector<int32_t> make_targets(int64_t N, int64_t V, uint64_t seed, bool with_ignored = true) {
  const std::vector<float> u = random_vector(N, seed, 0.0f, 1.0f);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n)
    t[n] = (with_ignored && n % 3 == 2) ? static_cast<int32_t>(kIgnore)
                                         : static_cast<int32_t>(std::fmin(u[n] * V, V - 1));
  return t;
}

// logits [N, V] as two tp ranks hold them: shard[r] [N, V/2] the columns of rank r; and row_max [N],
// the max over both shards' (1) pieces, as the max all-reduce gives it.
template <typename T>
void split_in_two(const std::vector<T>& logits, const std::vector<int32_t>& targets, int64_t N, int64_t V,
                  std::vector<T> shard[2], std::vector<float>& row_max) {
  const int64_t Vl = V / 2;
  std::vector<float> part(N);
  row_max.assign(N, -INFINITY);
  for (int r = 0; r < 2; ++r) {
    shard[r].resize(N * Vl);
    for (int64_t n = 0; n < N; ++n)
      std::copy(logits.begin() + n * V + r * Vl, logits.begin() + n * V + (r + 1) * Vl, shard[r].begin() + n * Vl);
    cpu::cross_entropy_shard_max(part.data(), shard[r].data(), targets.data(), kIgnore, N, Vl);
    for (int64_t n = 0; n < N; ++n) row_max[n] = std::fmax(row_max[n], part[n]);
  }
}

// Every element within rtol * |ref| + atol (NaN fails); reports the first offender.
void expect_close(const float* a, const double* ref, int64_t n, double rtol, double atol, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(e <= rtol * std::fabs(ref[i]) + atol)) {
      ADD_FAILURE() << what << "[" << i << "] = " << a[i] << ", reference " << ref[i];
      return;
    }
  }
}

// Runs the kernel on poisoned outputs and compares everything with the reference.
void check_against_reference(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                             const std::vector<float>& weights, float grad_scale, int64_t N, int64_t V,
                             double loss_rtol) {
  const CeRef r = ce_ref(to_double(logits), targets, weights, grad_scale, N, V);
  std::vector<float> losses(N, kNaN), dlogits(N * V, kNaN);
  const double total = cpu::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(),
                                                           weights.empty() ? nullptr : weights.data(), kIgnore,
                                                           grad_scale, N, V);
  expect_close(losses.data(), r.losses.data(), N, loss_rtol, 1e-6, "losses");
  // Probabilities down to ~1e-30 keep their relative precision; atol covers the rest.
  expect_close(dlogits.data(), r.dlogits.data(), N * V, 1e-5, 1e-12, "dlogits");
  EXPECT_NEAR(total, r.total, loss_rtol * std::fabs(r.total) + 1e-6);
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] == kIgnore) {
      EXPECT_EQ(losses[n], 0.0f);
      for (int64_t v = 0; v < V; ++v) ASSERT_EQ(dlogits[n * V + v], 0.0f) << "ignored row " << n;
    }
}

}  // namespace

// dlogits of the reference = d(grad_scale * sum of losses) / dlogits, by central differences.
TEST(CrossEntropy, ReferenceGradientMatchesFiniteDifferences) {
  const int64_t N = 4, V = 7;
  std::vector<double> x = to_double(random_vector(N * V, 1, -3.0f, 3.0f));
  const std::vector<int32_t> targets = make_targets(N, V, 2);
  const std::vector<float> weights = random_vector(N, 3, 0.0f, 2.0f);
  const double grad_scale = 0.37;
  const CeRef r = ce_ref(x, targets, weights, grad_scale, N, V);
  const auto g = numerical_gradient<double>(x, [&] { return grad_scale * ce_ref(x, targets, weights, 0.0, N, V).total; },
                                            1e-6);
  for (int64_t i = 0; i < N * V; ++i) ASSERT_NEAR(g[i], r.dlogits[i], 1e-8) << i;
}

TEST(CrossEntropy, MatchesReference) {
  for (int64_t N : {1, 7, 33})
    for (int64_t V : {1, 13, 100})
      for (bool weighted : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "N = " << N << " V = " << V << (weighted ? " weighted" : ""));
        const std::vector<float> logits = random_vector(N * V, 10 + N * V, -8.0f, 8.0f);
        const std::vector<int32_t> targets = make_targets(N, V, 20 + N * V);
        std::vector<float> weights;
        if (weighted) {
          weights = random_vector(N, 30 + N, 0.0f, 2.0f);
          weights[0] = 0.0f;  // a zero weight gives zero loss and gradient
        }
        check_against_reference(logits, targets, weights, 1.0f / static_cast<float>(N), N, V, 2e-6);
      }
}

// dlogits aliasing logits, and dlogits / losses null, give the same bits as the plain call.
TEST(CrossEntropy, InPlaceAndForwardOnly) {
  const int64_t N = 33, V = 100;
  const std::vector<float> logits = random_vector(N * V, 40, -5.0f, 5.0f);
  const std::vector<int32_t> targets = make_targets(N, V, 41);
  const std::vector<float> weights = random_vector(N, 42, 0.5f, 1.5f);
  std::vector<float> losses(N, kNaN), dlogits(N * V, kNaN);
  const double total = cpu::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(),
                                                           weights.data(), kIgnore, 0.25f, N, V);
  std::vector<float> inplace = logits, losses2(N, kNaN);
  const double total2 = cpu::cross_entropy_forward_backward(losses2.data(), inplace.data(), inplace.data(),
                                                            targets.data(), weights.data(), kIgnore, 0.25f, N, V);
  EXPECT_EQ(total2, total);
  EXPECT_EQ(0, std::memcmp(losses2.data(), losses.data(), N * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(inplace.data(), dlogits.data(), N * V * sizeof(float)));
  std::vector<float> losses3(N, kNaN);
  const double total3 = cpu::cross_entropy_forward_backward(losses3.data(), nullptr, logits.data(), targets.data(),
                                                            weights.data(), kIgnore, 0.25f, N, V);
  EXPECT_EQ(total3, total);
  EXPECT_EQ(0, std::memcmp(losses3.data(), losses.data(), N * sizeof(float)));
  const double total4 = cpu::cross_entropy_forward_backward(nullptr, nullptr, logits.data(), targets.data(),
                                                            weights.data(), kIgnore, 0.25f, N, V);
  EXPECT_EQ(total4, total);
}

// Logits of magnitude 1e4 (exp would overflow without the max shift) stay finite and exact.
TEST(CrossEntropy, LargeLogitsStayFinite) {
  const int64_t N = 7, V = 13;
  std::vector<float> logits = random_vector(N * V, 50, -1e4f, 1e4f);
  for (int64_t v = 0; v < V; ++v) logits[v] = 1e4f;                    // row 0: all equal, loss = log V
  for (int64_t v = 0; v < V; ++v) logits[V + v] = v == 3 ? 1e4f : 0.0f;  // row 1: certain, loss 0
  std::vector<int32_t> targets = make_targets(N, V, 51, false);
  targets[0] = 5;
  targets[1] = 3;
  check_against_reference(logits, targets, {}, 1.0f, N, V, 1e-6);
  std::vector<float> losses(N, kNaN), dlogits(N * V, kNaN);
  cpu::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(), nullptr, kIgnore,
                                      1.0f, N, V);
  for (float x : dlogits) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NEAR(losses[0], std::log(13.0), 1e-6);
  EXPECT_EQ(losses[1], 0.0f);
}

// The padded GPT-2 vocabulary: a few rows against the reference; each row's gradient sums to ~0.
TEST(CrossEntropy, Vocab50304) {
  const int64_t N = 3, V = 50304;
  const std::vector<float> logits = random_vector(N * V, 60, -10.0f, 10.0f);
  const std::vector<int32_t> targets = make_targets(N, V, 61, false);
  check_against_reference(logits, targets, {}, 1.0f, N, V, 2e-6);
  std::vector<float> dlogits(N * V, kNaN);
  cpu::cross_entropy_forward_backward(nullptr, dlogits.data(), logits.data(), targets.data(), nullptr, kIgnore, 1.0f,
                                      N, V);
  for (int64_t n = 0; n < N; ++n) {
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += dlogits[n * V + v];
    EXPECT_NEAR(s, 0.0, 1e-6) << "row " << n;
  }
}

// Losses, gradients and the returned total: the same bits for 1 and 2 threads.
TEST(CrossEntropy, ThreadCountIndependent) {
  const int64_t N = 64, V = 1000;
  const std::vector<float> logits = random_vector(N * V, 70, -6.0f, 6.0f);
  const std::vector<int32_t> targets = make_targets(N, V, 71);
  const std::vector<float> weights = random_vector(N, 72, 0.0f, 3.0f);
  std::vector<float> losses[2], dlogits[2];
  double total[2];
  for (int t = 0; t < 2; ++t) {
    ThreadCount threads(t + 1);
    losses[t].assign(N, kNaN);
    dlogits[t].assign(N * V, kNaN);
    total[t] = cpu::cross_entropy_forward_backward(losses[t].data(), dlogits[t].data(), logits.data(), targets.data(),
                                                   weights.data(), kIgnore, 1.0f / N, N, V);
  }
  EXPECT_EQ(std::memcmp(&total[0], &total[1], sizeof(double)), 0);
  EXPECT_EQ(0, std::memcmp(losses[0].data(), losses[1].data(), N * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dlogits[0].data(), dlogits[1].data(), N * V * sizeof(float)));
}

TEST(CrossEntropy, TargetsOutsideTheVocabularyAreErrors) {
  const int64_t N = 2, V = 5;
  const std::vector<float> logits = random_vector(N * V, 80);
  std::vector<float> dlogits(N * V);
  for (int32_t bad : {5, -1, 1 << 30}) {
    const std::vector<int32_t> targets = {0, bad};
    try {
      cpu::cross_entropy_forward_backward(nullptr, dlogits.data(), logits.data(), targets.data(), nullptr, kIgnore,
                                          1.0f, N, V);
      ADD_FAILURE() << "target " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("targets[1] = " + std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  // ignore_index itself is accepted even though it lies outside [0, V).
  const std::vector<int32_t> ok = {0, static_cast<int32_t>(kIgnore)};
  EXPECT_NO_THROW(cpu::cross_entropy_forward_backward(nullptr, dlogits.data(), logits.data(), ok.data(), nullptr,
                                                      kIgnore, 1.0f, N, V));
}

// The bf16 gradient is the fp32 gradient rounded, bit for bit, with the same losses and total, for 1 and
// 2 threads; ignored rows are bf16 zeros. V = 1000 and a row of 50304 (the padded GPT-2 vocabulary).
TEST(CrossEntropy, Bf16GradientIsTheFp32GradientRounded) {
  for (const int64_t V : {int64_t{1000}, int64_t{50304}}) {
    const int64_t N = V > 1000 ? 4 : 37;
    const std::vector<float> logits = random_vector(N * V, 90 + V, -8.0f, 8.0f);
    const std::vector<int32_t> targets = make_targets(N, V, 91);
    const std::vector<float> weights = random_vector(N, 92, 0.2f, 2.0f);
    std::vector<float> losses(N, kNaN), dlogits(N * V, kNaN);
    const double total = cpu::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(),
                                                             targets.data(), weights.data(), kIgnore, 0.125f, N, V);
    for (int threads : {1, 2}) {
      ThreadCount t(threads);
      std::vector<float> losses_b(N, kNaN);
      std::vector<uint16_t> bits(N * V, 0x7FC0);  // bf16 NaN
      const double total_b = cpu::cross_entropy_forward_backward_bf16(
          losses_b.data(), bits.data(), logits.data(), targets.data(), weights.data(), kIgnore, 0.125f, N, V);
      EXPECT_EQ(std::memcmp(&total_b, &total, sizeof(double)), 0) << threads << " threads, V " << V;
      EXPECT_EQ(0, std::memcmp(losses_b.data(), losses.data(), N * sizeof(float)));
      for (int64_t i = 0; i < N * V; ++i)
        ASSERT_EQ(bits[i], f32_to_bf16(dlogits[i])) << "element " << i << ", " << threads << " threads, V " << V;
    }
  }
}

// The vocab-parallel pieces, two shards in one process (what two tp ranks compute between their
// all-reduces): the bf16 gradient of each shard is its fp32 gradient rounded, and e stays in dlogits.
TEST(CrossEntropy, ShardFinishBf16IsTheFp32GradientRounded) {
  const int64_t N = 29, V = 600, Vl = V / 2;
  const std::vector<float> logits = random_vector(N * V, 95, -6.0f, 6.0f);
  const std::vector<int32_t> targets = make_targets(N, V, 96);
  const std::vector<float> weights = random_vector(N, 97, 0.5f, 1.5f);
  std::vector<float> shard[2], row_max;
  split_in_two(logits, targets, N, V, shard, row_max);
  std::vector<double> stats(2 * N, 0.0), st(2 * N);
  std::vector<float> e[2];
  for (int r = 0; r < 2; ++r) {
    e[r].assign(N * Vl, kNaN);
    cpu::cross_entropy_shard_sumexp(st.data(), e[r].data(), shard[r].data(), row_max.data(), targets.data(), kIgnore,
                                    r * Vl, N, Vl);
    for (int64_t i = 0; i < 2 * N; ++i) stats[i] += st[i];
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<float> d32 = e[r], d16 = e[r], l32(N, kNaN), l16(N, kNaN);
    std::vector<uint16_t> bits(N * Vl, 0x7FC0);
    const double t32 = cpu::cross_entropy_shard_finish(l32.data(), d32.data(), stats.data(), row_max.data(),
                                                       targets.data(), weights.data(), kIgnore, 0.5f, r * Vl, N, Vl);
    const double t16 = cpu::cross_entropy_shard_finish(l16.data(), d16.data(), stats.data(), row_max.data(),
                                                       targets.data(), weights.data(), kIgnore, 0.5f, r * Vl, N, Vl,
                                                       bits.data());
    EXPECT_EQ(std::memcmp(&t16, &t32, sizeof(double)), 0) << "shard " << r;
    EXPECT_EQ(0, std::memcmp(l16.data(), l32.data(), N * sizeof(float))) << "shard " << r;
    EXPECT_EQ(0, std::memcmp(d16.data(), e[r].data(), N * Vl * sizeof(float))) << "shard " << r << ": e overwritten";
    for (int64_t i = 0; i < N * Vl; ++i) ASSERT_EQ(bits[i], f32_to_bf16(d32[i])) << "shard " << r << ", element " << i;
  }
}

// bf16 logits (the output layer under --bf16): losses and the in-place bf16 gradient against the double
// reference computed from the same bf16 values, bitwise the same for 1 and 2 threads; at V = 50304 too.
TEST(CrossEntropy, Bf16LogitsInPlaceMatchTheReference) {
  for (const int64_t V : {int64_t{1000}, int64_t{50304}}) {
    const int64_t N = V > 1000 ? 4 : 37;
    std::vector<uint16_t> logits(N * V);
    const std::vector<float> values = random_vector(N * V, 300 + V, -8.0f, 8.0f);
    std::vector<double> x(N * V);
    for (int64_t i = 0; i < N * V; ++i) {
      logits[i] = f32_to_bf16(values[i]);
      x[i] = bf16_to_f32(logits[i]);
    }
    const std::vector<int32_t> targets = make_targets(N, V, 301);
    const std::vector<float> weights = random_vector(N, 302, 0.2f, 2.0f);
    const CeRef ref = ce_ref(x, targets, weights, 0.125, N, V);
    std::vector<uint16_t> first;
    for (int threads : {1, 2}) {
      ThreadCount t(threads);
      std::vector<uint16_t> d = logits;  // in place
      std::vector<float> losses(N, kNaN);
      const double total = cpu::cross_entropy_forward_backward_bf16(losses.data(), d.data(), d.data(), targets.data(),
                                                                    weights.data(), kIgnore, 0.125f, N, V);
      EXPECT_NEAR(total, ref.total, 1e-5 * std::fabs(ref.total)) << threads << " threads, V " << V;
      expect_close(losses.data(), ref.losses.data(), N, 1e-5, 1e-6, "losses");
      std::vector<float> g(N * V);
      for (int64_t i = 0; i < N * V; ++i) g[i] = bf16_to_f32(d[i]);
      // bf16 keeps 8 significant bits: half an ulp of rounding, plus the fp32 arithmetic before it.
      expect_close(g.data(), ref.dlogits.data(), N * V, 1.0 / 256, 1e-9, "dlogits");
      if (first.empty()) first = d;
      else EXPECT_EQ(0, std::memcmp(first.data(), d.data(), d.size() * sizeof(uint16_t))) << "V " << V;
    }
  }
}

// The vocab-parallel pieces on bf16 logits, two shards in one process: the same losses as the
// single-rank kernel and each gradient element within one bf16 step of its gradient (the softmax
// denominator is summed in other blocks); forward only (no gradient) gives the same losses.
TEST(CrossEntropy, Bf16LogitsShardsMatchOneRank) {
  const int64_t N = 29, V = 600, Vl = V / 2;
  const std::vector<float> values = random_vector(N * V, 310, -6.0f, 6.0f);
  std::vector<uint16_t> logits(N * V);
  for (int64_t i = 0; i < N * V; ++i) logits[i] = f32_to_bf16(values[i]);
  const std::vector<int32_t> targets = make_targets(N, V, 311);
  const std::vector<float> weights = random_vector(N, 312, 0.5f, 1.5f);
  std::vector<uint16_t> one = logits;
  std::vector<float> one_losses(N);
  const double one_total = cpu::cross_entropy_forward_backward_bf16(one_losses.data(), one.data(), logits.data(),
                                                                    targets.data(), weights.data(), kIgnore, 0.5f, N, V);
  std::vector<uint16_t> shard[2];
  std::vector<float> row_max;
  split_in_two(logits, targets, N, V, shard, row_max);
  std::vector<double> stats(2 * N, 0.0), st(2 * N);
  for (int r = 0; r < 2; ++r) {
    cpu::cross_entropy_shard_sumexp(st.data(), shard[r].data(), row_max.data(), targets.data(), kIgnore, r * Vl, N, Vl);
    for (int64_t i = 0; i < 2 * N; ++i) stats[i] += st[i];
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<float> losses(N, kNaN), fwd_losses(N, kNaN);
    const double fwd = cpu::cross_entropy_shard_finish(fwd_losses.data(), nullptr, shard[r].data(), stats.data(),
                                                       row_max.data(), targets.data(), weights.data(), kIgnore, 0.5f,
                                                       r * Vl, N, Vl);
    std::vector<uint16_t> d = shard[r];  // in place
    const double total = cpu::cross_entropy_shard_finish(losses.data(), d.data(), d.data(), stats.data(),
                                                         row_max.data(), targets.data(), weights.data(), kIgnore, 0.5f,
                                                         r * Vl, N, Vl);
    EXPECT_EQ(std::memcmp(&fwd, &total, sizeof(double)), 0) << "shard " << r;
    EXPECT_EQ(0, std::memcmp(fwd_losses.data(), losses.data(), N * sizeof(float))) << "shard " << r;
    EXPECT_NEAR(total, one_total, 1e-7 * std::fabs(one_total)) << "shard " << r;
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_NEAR(losses[n], one_losses[n], 1e-6 * std::fabs(one_losses[n]) + 1e-7) << "row " << n;
      for (int64_t v = 0; v < Vl; ++v) {
        const int a = d[n * Vl + v], b = one[n * V + r * Vl + v];
        ASSERT_LE(std::abs(a - b), 1) << "shard " << r << ", row " << n << ", column " << v;  // same sign: bits adjacent
      }
    }
  }
}
