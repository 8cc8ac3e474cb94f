#pragma once
// The six products of an SwiGLU expert layer (fc1 [F1, C], fc2 [C, F], F1 = 2F) over P routed rows grouped
// by expert, forward (2) and backward (2 input-gradient, 2 weight-gradient), through either the grouped
// ops of a Backend (Backend::grouped_gemm_*) or its per-expert loop of ordinary products (the Backend's
// default definitions), on the same operands: what bench_moe (CPU) and bench/cuda/bench_grouped_gemm
// (GPU) time side by side. The operands live in a Store's buffers: host vectors, or device buffers.
// Legend: E experts, P routed rows, C hidden, F expert ffn.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "kernels/backend.h"

namespace megadlm::bench {

// Offsets [E+1] of skewed loads over E experts summing to P: expert e gets a share proportional to
// ratio^e, the last none.
inline std::vector<int64_t> skewed_offsets(int64_t E, int64_t P, double ratio) {
  std::vector<double> w(static_cast<size_t>(E), 0.0);
  double sum = 0;
  for (int64_t e = 0; e + 1 < E; ++e) sum += (w[e] = std::pow(ratio, static_cast<double>(e)));
  std::vector<int64_t> off{0};
  double acc = 0;
  for (int64_t e = 0; e < E; ++e) {
    acc += w[e];
    off.push_back(e + 1 == E ? P : static_cast<int64_t>(std::llround(acc / sum * static_cast<double>(P))));
  }
  return off;
}

// n values uniform with standard deviation `std` (counter-based: the same on every run and device).
inline std::vector<float> uniform_values(int64_t n, uint64_t seed, float std) {
  const CounterRng rng(seed, RngPurpose::Test);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std * (rng.uniform(i, 0) * 2.0f - 1.0f) * 1.7320508f;
  return x;
}

// Store: Buf (data(): its float* on the backend's device), static Buf make(const std::vector<float>&),
// static Buf zeros(int64_t n), static void zero(Buf&), static std::vector<float> read(const Buf&).
template <class Store>
struct ExpertProducts {
  using Buf = typename Store::Buf;
  int64_t E, P, C, F, F1;
  std::vector<int64_t> off;
  Buf x, h, a, y, dy, da, dh, dx;
  std::vector<Buf> w1, w2, dw1, dw2;

  ExpertProducts(int64_t E_, const std::vector<int64_t>& off_, int64_t C_, int64_t F_)
      : E(E_), P(off_.back()), C(C_), F(F_), F1(2 * F_), off(off_) {
    x = Store::make(uniform_values(P * C, 11, 1.0f));
    a = Store::make(uniform_values(P * F, 12, 1.0f));
    dy = Store::make(uniform_values(P * C, 13, 1e-3f));
    dh = Store::make(uniform_values(P * F1, 14, 1e-3f));
    h = Store::zeros(P * F1), y = Store::zeros(P * C), da = Store::zeros(P * F), dx = Store::zeros(P * C);
    for (int64_t e = 0; e < E; ++e) {
      w1.push_back(Store::make(uniform_values(F1 * C, 100 + e, 0.02f)));
      w2.push_back(Store::make(uniform_values(C * F, 200 + e, 0.02f)));
      dw1.push_back(Store::zeros(F1 * C));
      dw2.push_back(Store::zeros(C * F));
    }
  }
  template <typename T>
  static std::vector<T*> ptrs(std::vector<Buf>& v) {
    std::vector<T*> p;
    for (Buf& m : v) p.push_back(m.data());
    return p;
  }
  // The forward's two products (the activation between them is not timed: both paths would run the same
  // one-pass activation).
  void forward(const Backend& be, bool grouped) {
    const auto W1 = ptrs<const float>(w1), W2 = ptrs<const float>(w2);
    if (grouped) {
      be.grouped_gemm_forward(E, off.data(), F1, C, x.data(), W1.data(), h.data());
      be.grouped_gemm_forward(E, off.data(), C, F, a.data(), W2.data(), y.data());
    } else {
      be.Backend::grouped_gemm_forward(E, off.data(), F1, C, x.data(), W1.data(), h.data());
      be.Backend::grouped_gemm_forward(E, off.data(), C, F, a.data(), W2.data(), y.data());
    }
  }
  // The backward's two input-gradient products (fc2's then fc1's).
  void backward_data(const Backend& be, bool grouped) {
    const auto W1 = ptrs<const float>(w1), W2 = ptrs<const float>(w2);
    if (grouped) {
      be.grouped_gemm_backward_data(E, off.data(), C, F, dy.data(), W2.data(), da.data());
      be.grouped_gemm_backward_data(E, off.data(), F1, C, dh.data(), W1.data(), dx.data());
    } else {
      be.Backend::grouped_gemm_backward_data(E, off.data(), C, F, dy.data(), W2.data(), da.data());
      be.Backend::grouped_gemm_backward_data(E, off.data(), F1, C, dh.data(), W1.data(), dx.data());
    }
  }
  // The backward's two weight-gradient products (fc2's then fc1's), accumulated.
  void backward_weight(const Backend& be, bool grouped) {
    const auto dW1 = ptrs<float>(dw1), dW2 = ptrs<float>(dw2);
    if (grouped) {
      be.grouped_gemm_backward_weight(E, off.data(), C, F, dy.data(), a.data(), dW2.data());
      be.grouped_gemm_backward_weight(E, off.data(), F1, C, dh.data(), x.data(), dW1.data());
    } else {
      be.Backend::grouped_gemm_backward_weight(E, off.data(), C, F, dy.data(), a.data(), dW2.data());
      be.Backend::grouped_gemm_backward_weight(E, off.data(), F1, C, dh.data(), x.data(), dW1.data());
    }
  }
  void backward(const Backend& be, bool grouped) {
    backward_data(be, grouped);
    backward_weight(be, grouped);
  }
  // Every output of one forward + backward (weight gradients from zero), in one host vector.
  std::vector<float> outputs(const Backend& be, bool grouped) {
    for (auto* m : {&dw1, &dw2})
      for (Buf& w : *m) Store::zero(w);
    forward(be, grouped);
    backward(be, grouped);
    be.synchronize();
    std::vector<float> out;
    auto append = [&](const Buf& b) {
      const std::vector<float> v = Store::read(b);
      out.insert(out.end(), v.begin(), v.end());
    };
    for (const Buf* b : {&h, &y, &da, &dx}) append(*b);
    for (const auto* m : {&dw1, &dw2})
      for (const Buf& w : *m) append(w);
    return out;
  }
};

// The CPU's Store: host vectors.
struct HostStore {
  struct Buf {
    std::vector<float> v;
    float* data() { return v.data(); }
  };
  static Buf make(const std::vector<float>& values) { return Buf{values}; }
  static Buf zeros(int64_t n) { return Buf{std::vector<float>(static_cast<size_t>(n), 0.0f)}; }
  static void zero(Buf& b) { std::fill(b.v.begin(), b.v.end(), 0.0f); }
  static std::vector<float> read(const Buf& b) { return b.v; }
};

}  // namespace megadlm::bench
