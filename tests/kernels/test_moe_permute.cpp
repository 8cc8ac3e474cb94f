// The MoE row permutations (kernels/cpu/moe_permute.h) against double references: the gather with and
// without weights (padding rows zero), the CSR combine in list order, the router-weight gradient, and
// that gradient and the input gradient against central differences of sum(unpermute(rows) * g).
// Bitwise independent of the thread count (each row or token is one thread's work).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/moe_permute.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

// A routing of N tokens to k rows each, in shuffled order, with `pad` padding rows (token -1) spread in,
// and its CSR inverse index (ascending rows per token).
struct Routing {
  int64_t N = 0, P = 0;
  std::vector<int32_t> token, offsets, list;
};

Routing make_routing(int64_t N, int64_t k, int64_t pad, uint64_t seed) {
  Routing r;
  r.N = N;
  r.P = N * k + pad;
  const std::vector<float> u = random_vector(r.P, seed, 0.0f, 1.0f);
  std::vector<int32_t> slots;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < k; ++j) slots.push_back(static_cast<int32_t>(n));
  for (int64_t j = 0; j < pad; ++j) slots.push_back(-1);
  for (int64_t i = r.P - 1; i > 0; --i) std::swap(slots[i], slots[std::min<int64_t>(i, static_cast<int64_t>(u[i] * (i + 1)))]);
  r.token = slots;
  r.offsets.assign(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < r.P; ++p)
      if (r.token[p] == n) r.list.push_back(static_cast<int32_t>(p));
    r.offsets[n + 1] = static_cast<int32_t>(r.list.size());
  }
  return r;
}

struct ThreadCount {
  int saved = omp_get_max_threads();
  explicit ThreadCount(int n) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
};

}  // namespace

TEST(MoePermute, GatherIsExactAndPaddingIsZero) {
  for (const int64_t C : {1, 7, 64, 300}) {
    const Routing r = make_routing(23, 2, 5, 10 + C);
    const std::vector<float> x = random_vector(r.N * C, 1, -1.0f, 1.0f);
    const std::vector<float> w = random_vector(r.P, 2, 0.1f, 1.0f);
    std::vector<float> rows(r.P * C, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> weighted = rows;
    cpu::moe_permute(rows.data(), x.data(), r.token.data(), nullptr, r.P, C);
    cpu::moe_permute(weighted.data(), x.data(), r.token.data(), w.data(), r.P, C);
    int64_t padding = 0;
    for (int64_t p = 0; p < r.P; ++p) {
      padding += r.token[p] < 0;
      for (int64_t c = 0; c < C; ++c) {
        const float src = r.token[p] < 0 ? 0.0f : x[r.token[p] * C + c];
        ASSERT_EQ(rows[p * C + c], src) << "row " << p << " column " << c;
        ASSERT_EQ(weighted[p * C + c], r.token[p] < 0 ? 0.0f : w[p] * src) << "row " << p;  // one fp32 product
      }
    }
    EXPECT_EQ(padding, 5);
  }
}

TEST(MoePermute, UnpermuteSumsTheListedRows) {
  const int64_t C = 45;
  Routing r = make_routing(19, 3, 4, 7);
  r.offsets[5] = r.offsets[4];  // token 4 lists no rows (its output is zero), token 5 lists 4's and its own
  const std::vector<float> rows = random_vector(r.P * C, 3, -1.0f, 1.0f);
  const std::vector<float> w = random_vector(r.P, 4, 0.1f, 1.0f);
  for (const bool weighted : {false, true}) {
    std::vector<float> out(r.N * C, std::numeric_limits<float>::quiet_NaN());
    cpu::moe_unpermute(out.data(), rows.data(), r.offsets.data(), r.list.data(), weighted ? w.data() : nullptr, r.N, C);
    for (int64_t n = 0; n < r.N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        double ref = 0;
        for (int32_t i = r.offsets[n]; i < r.offsets[n + 1]; ++i)
          ref += (weighted ? static_cast<double>(w[r.list[i]]) : 1.0) * rows[r.list[i] * C + c];
        if (n == 4) {
          ASSERT_EQ(out[n * C + c], 0.0f);
        }
        ASSERT_NEAR(out[n * C + c], ref, 1e-6 * (1 + std::abs(ref))) << "token " << n << " column " << c;
      }
  }
}

// L = sum_n sum_c g[n, c] * unpermute(rows, w)[n, c]: dL/dw by moe_unpermute_weight_grad and dL/drows by
// moe_permute of g with the weights, each against central differences (in double, of the fp32 kernel).
TEST(MoePermute, GradientsMatchFiniteDifferences) {
  const int64_t C = 9;
  const Routing r = make_routing(6, 2, 2, 11);
  std::vector<float> rows = random_vector(r.P * C, 5, -1.0f, 1.0f);
  std::vector<float> w = random_vector(r.P, 6, 0.2f, 1.0f);
  const std::vector<float> g = random_vector(r.N * C, 7, -1.0f, 1.0f);
  auto loss = [&] {
    std::vector<float> out(r.N * C);
    cpu::moe_unpermute(out.data(), rows.data(), r.offsets.data(), r.list.data(), w.data(), r.N, C);
    double s = 0;
    for (int64_t i = 0; i < r.N * C; ++i) s += static_cast<double>(g[i]) * out[i];
    return s;
  };
  std::vector<float> dw(r.P, std::numeric_limits<float>::quiet_NaN());
  cpu::moe_unpermute_weight_grad(dw.data(), g.data(), rows.data(), r.token.data(), r.P, C);
  std::vector<float> drows(r.P * C, std::numeric_limits<float>::quiet_NaN());
  cpu::moe_permute(drows.data(), g.data(), r.token.data(), w.data(), r.P, C);
  const float h = 1e-2f;  // the loss is linear in each argument: the difference is exact up to rounding
  auto central = [&](float& v) {
    const float v0 = v;
    v = v0 + h;
    const double up = loss();
    v = v0 - h;
    const double down = loss();
    v = v0;
    return (up - down) / (2.0 * h);
  };
  for (int64_t p = 0; p < r.P; ++p) {
    EXPECT_NEAR(dw[p], central(w[p]), 1e-4) << "dweight of row " << p;
    if (r.token[p] < 0) {
      EXPECT_EQ(dw[p], 0.0f);
    }
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(drows[p * C + c], central(rows[p * C + c]), 1e-4) << "row " << p;
  }
}

TEST(MoePermute, ThreadCountDoesNotChangeABit) {
  const int64_t C = 512;  // above the threading threshold
  const Routing r = make_routing(200, 2, 8, 13);
  const std::vector<float> x = random_vector(r.N * C, 8, -1.0f, 1.0f);
  const std::vector<float> w = random_vector(r.P, 9, 0.1f, 1.0f);
  auto run = [&](int threads) {
    ThreadCount tc(threads);
    std::vector<float> rows(r.P * C), out(r.N * C), dw(r.P);
    cpu::moe_permute(rows.data(), x.data(), r.token.data(), w.data(), r.P, C);
    cpu::moe_unpermute(out.data(), rows.data(), r.offsets.data(), r.list.data(), w.data(), r.N, C);
    cpu::moe_unpermute_weight_grad(dw.data(), x.data(), rows.data(), r.token.data(), r.P, C);
    out.insert(out.end(), dw.begin(), dw.end());
    return out;
  };
  EXPECT_EQ(run(1), run(2));
}
