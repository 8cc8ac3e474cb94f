// The row softmax and its backward (kernels/cpu/softmax.h) against double references: the forward
// against the formula, the backward against finite differences of L = sum(R * softmax(x)) in double,
// and bitwise equality at 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/softmax.h"
#include "test_util.h"

namespace megadlm {
namespace {

using test::random_vector;

std::vector<double> softmax_ref(const std::vector<double>& x, int64_t N, int64_t V) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::fmax(mx, x[n * V + j]);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[n * V + j] - mx);
    for (int64_t j = 0; j < V; ++j) y[n * V + j] = std::exp(x[n * V + j] - mx) / sum;
  }
  return y;
}

TEST(Softmax, ForwardMatchesDoubleReference) {
  for (auto [N, V] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {17, 64}, {8, 1000}}) {
    std::vector<float> x = random_vector(N * V, 11 + V, -8.0f, 8.0f);
    if (N * V > 1) x[1] = 60.0f;  // a large logit: the max must be subtracted
    std::vector<float> y(x.size());
    cpu::softmax_forward(y.data(), x.data(), N, V);
    const std::vector<double> ref = softmax_ref(test::to_double(x), N, V);
    EXPECT_LT(test::max_rel_error(y, ref), 1e-6) << N << " x " << V;
    std::vector<float> in_place = x;  // out may alias inp
    cpu::softmax_forward(in_place.data(), in_place.data(), N, V);
    EXPECT_EQ(in_place, y);
  }
}

TEST(Softmax, BackwardMatchesFiniteDifferencesOfTheReference) {
  const int64_t N = 5, V = 13;
  const std::vector<float> x = random_vector(N * V, 21, -3.0f, 3.0f);
  const std::vector<float> R = random_vector(N * V, 22);
  std::vector<float> y(x.size()), dx(x.size());
  cpu::softmax_forward(y.data(), x.data(), N, V);
  cpu::softmax_backward(dx.data(), y.data(), R.data(), N, V);
  // dL/dx of L(x) = sum R * softmax(x), by central differences in double.
  std::vector<double> xd = test::to_double(x), numeric(x.size());
  auto loss = [&] {
    const std::vector<double> s = softmax_ref(xd, N, V);
    double l = 0.0;
    for (size_t i = 0; i < s.size(); ++i) l += R[i] * s[i];
    return l;
  };
  for (size_t i = 0; i < xd.size(); ++i) {
    const double saved = xd[i];
    xd[i] = saved + 1e-6;
    const double up = loss();
    xd[i] = saved - 1e-6;
    const double down = loss();
    xd[i] = saved;
    numeric[i] = (up - down) / 2e-6;
  }
  EXPECT_LT(test::max_rel_error(dx, numeric), 1e-5);
  // din may alias dout.
  std::vector<float> in_place = R;
  cpu::softmax_backward(in_place.data(), y.data(), in_place.data(), N, V);
  EXPECT_EQ(in_place, dx);
}

TEST(Softmax, BitwiseIdenticalAtOneAndTwoThreads) {
  const int64_t N = 300, V = 77;  // above the threading threshold
  const std::vector<float> x = random_vector(N * V, 31, -5.0f, 5.0f), R = random_vector(N * V, 32);
  std::vector<float> y[2], dx[2];
  const int saved = omp_get_max_threads();
  for (int t = 0; t < 2; ++t) {
    omp_set_num_threads(t + 1);
    y[t].resize(x.size());
    dx[t].resize(x.size());
    cpu::softmax_forward(y[t].data(), x.data(), N, V);
    cpu::softmax_backward(dx[t].data(), y[t].data(), R.data(), N, V);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dx[0], dx[1]);
}

}  // namespace
}  // namespace megadlm
