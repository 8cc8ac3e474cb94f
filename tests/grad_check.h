#pragma once
// Finite-difference gradient checks of nn modules and small models. A module is seen as a
// scalar function of its parameters (perturbed through the ParamStore values) and of its float input:
// L = sum(out * R) with a fixed random R, accumulated in double from the fp32 outputs. The analytic
// gradients come from one forward + backward with dL/dout = R. Differences use h = 1e-2 in fp32, so
// the comparison is loose: the error is measured relative to the largest |gradient| of each tensor
// (floored at 1e-2 of the module's largest gradient) and must stay under 2e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/hash.h"
#include "core/parameters.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "test_util.h"

namespace megadlm::test::grad_check {

inline constexpr double kStep = 1e-2;  // finite-difference step, in fp32
inline constexpr double kTol = 2e-2;   // relative to the largest |gradient| of the tensor

// Gives every parameter values large enough that every nonlinearity is exercised: weights ~ U(-0.4,
// 0.4), norm weights around 1 but not equal to it, nonzero biases. Keyed by name like init().
inline void randomize(ParamStore& store, uint64_t seed) {
  for (const ParamInfo& p : store.infos()) {
    const std::vector<float> r = megadlm::test::random_vector(p.shape.numel(), seed ^ fnv1a64(p.name));
    float* w = store.values() + p.offset;
    for (size_t i = 0; i < r.size(); ++i) {
      switch (p.init) {
        case Init::Ones: w[i] = 1.0f + 0.3f * r[i]; break;
        case Init::Zeros: w[i] = 0.2f * r[i]; break;
        case Init::Normal: w[i] = 0.4f * r[i]; break;
      }
    }
  }
}

// Indices of the elements of an n-element tensor to probe: all of them when n <= max_samples, else
// one pseudo-random element in each of max_samples equal strides (so every region is visited).
inline std::vector<int64_t> sample_indices(int64_t n, int max_samples, uint64_t seed) {
  std::vector<int64_t> idx;
  if (n <= max_samples) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  CounterRng rng(seed, RngPurpose::Test);
  for (int k = 0; k < max_samples; ++k) {
    const int64_t lo = k * n / max_samples, hi = (k + 1) * n / max_samples;
    idx.push_back(lo + static_cast<int64_t>(rng.uniform(k, 1) * static_cast<float>(hi - lo)) % (hi - lo));
  }
  return idx;
}

// max |analytic - numeric| over the probed elements of `values`, relative to the tensor's largest
// gradient (analytic over all elements, numeric over the probed ones) floored at `floor`. The floor
// matters for gradients that are zero in exact arithmetic (the k_proj bias shifts every score of a
// query row alike and softmax ignores it): there only the finite-difference noise is left.
inline double fd_relative_error(float* values, const float* analytic, int64_t n, const std::function<double()>& loss,
                         int max_samples, uint64_t seed, double floor) {
  double scale = floor, err = 0.0;
  for (int64_t i = 0; i < n; ++i) scale = std::fmax(scale, std::fabs(analytic[i]));
  for (int64_t i : sample_indices(n, max_samples, seed)) {
    const float saved = values[i];
    values[i] = static_cast<float>(saved + kStep);
    const double up = loss();
    values[i] = static_cast<float>(saved - kStep);
    const double down = loss();
    values[i] = saved;
    // The probe points are rounded to fp32; divide by the step actually taken.
    const double step = static_cast<double>(static_cast<float>(saved + kStep)) -
                        static_cast<double>(static_cast<float>(saved - kStep));
    const double numeric = (up - down) / step;
    scale = std::fmax(scale, std::fabs(numeric));
    const double e = std::fabs(numeric - analytic[i]);
    if (!(e <= err)) err = e;  // NaN propagates
  }
  return err / std::fmax(scale, 1e-6);
}

inline double max_abs(const std::vector<float>& x) {
  double m = 0.0;
  for (float v : x) m = std::fmax(m, std::fabs(v));
  return m;
}

// A module under test as a scalar function: runs the forward on x and returns the loss; when dx is
// not null also runs the backward (parameter gradients accumulated in the store) and writes dL/dx
// into *dx (an undefined Tensor for modules without a float input).
using RunFn = std::function<double(Arena& arena, const Tensor& x, Tensor* dx)>;

// Checks every parameter gradient in `store` and (when x0 is not empty) the input gradient.
inline void check_gradients(const std::string& what, ParamStore& store, Arena& arena, std::vector<float> x0,
                     const Shape& x_shape, const RunFn& run, int max_samples = 64) {
  Tensor x, dx;
  if (!x0.empty()) {
    ASSERT_EQ(x_shape.numel(), static_cast<int64_t>(x0.size()));
    x = Tensor::empty(x_shape, DType::F32);
    dx = Tensor::empty(x_shape, DType::F32);
    dx.fill_(std::numeric_limits<float>::quiet_NaN());  // poisoned: every element must be written
  }
  auto load_x = [&] {
    if (!x0.empty()) std::copy(x0.begin(), x0.end(), x.data<float>());
  };
  // Analytic gradients.
  store.zero_grads();
  arena.reset();
  load_x();
  const double l0 = run(arena, x, &dx);
  ASSERT_TRUE(std::isfinite(l0)) << what;
  const std::vector<float> param_grads(store.grads(), store.grads() + store.numel());
  std::vector<float> input_grad;
  if (!x0.empty()) input_grad.assign(dx.data<float>(), dx.data<float>() + dx.numel());
  for (size_t i = 0; i < input_grad.size(); ++i)
    ASSERT_TRUE(std::isfinite(input_grad[i])) << what << ": dx[" << i << "] not written or not finite";
  for (float g : param_grads) ASSERT_TRUE(std::isfinite(g)) << what << ": a parameter gradient is not finite";

  // The forward alone must give the same loss as the forward inside forward + backward.
  const std::function<double()> loss = [&] {
    arena.reset();
    load_x();
    return run(arena, x, nullptr);
  };
  EXPECT_NEAR(loss(), l0, 1e-6 * std::fabs(l0) + 1e-9) << what;
  // Floor of the per-tensor scale: 1e-2 of the largest gradient of the whole module.
  const double floor = 1e-2 * std::fmax(max_abs(param_grads), max_abs(input_grad));
  ASSERT_GT(floor, 0.0) << what << ": every gradient is zero";

  for (const ParamInfo& p : store.infos()) {
    const double err = fd_relative_error(store.values() + p.offset, param_grads.data() + p.offset,
                                         p.shape.numel(), loss, max_samples, fnv1a64(p.name), floor);
    EXPECT_LT(err, kTol) << what << ": gradient of " << p.name;
  }
  if (!x0.empty()) {
    const double err = fd_relative_error(x0.data(), input_grad.data(), static_cast<int64_t>(x0.size()), loss,
                                         max_samples, 7, floor);
    EXPECT_LT(err, kTol) << what << ": input gradient";
  }
}

// Wraps a module with forward(arena, x) -> y and backward(arena, dy, dx) into a RunFn with
// L = sum(y * R), R fixed and random.
inline RunFn sum_times_random(int64_t out_numel, uint64_t seed, std::function<Tensor(Arena&, const Tensor&)> forward,
                       std::function<void(Arena&, const Tensor&, Tensor&)> backward) {
  auto R = std::make_shared<std::vector<float>>(megadlm::test::random_vector(out_numel, seed));
  return [=](Arena& arena, const Tensor& x, Tensor* dx) {
    Tensor y = forward(arena, x);
    EXPECT_EQ(y.numel(), out_numel);
    double l = 0.0;
    const float* yp = y.data<float>();
    for (int64_t i = 0; i < out_numel; ++i) l += static_cast<double>(yp[i]) * (*R)[i];
    if (dx) {
      Tensor dy = arena.tensor(y.shape());
      std::copy(R->begin(), R->end(), dy.data<float>());
      backward(arena, dy, *dx);
    }
    return l;
  };
}

}  // namespace megadlm::test::grad_check
