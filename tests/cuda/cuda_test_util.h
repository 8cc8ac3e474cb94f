#pragma once
// Helpers of the CUDA op tests: fresh seeds per run (printed with every failure), device round trips,
// bf16 rounding of host data, and the fixture that skips without a device.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/error.h"
#include "test_util.h"

#ifdef MEGADLM_HAVE_CUDA
#include "kernels/cuda/ops.h"

namespace megadlm::test {

// A new seed every run (fresh random inputs each time, so that repeated runs cover more cases), shown in
// the failure message so that a failing case can be replayed by hand.
inline uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Skips every test of the suite when no device is visible.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0): CUDA op tests skipped";
    seed_ = fresh_seed();
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, "seed " + std::to_string(seed_));
  }
  // Distinct streams from one per-test seed.
  std::vector<float> rand(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    return random_vector(n, seed_ + 7919 * (++draws_), lo, hi);
  }
  uint64_t seed_ = 0;
  int draws_ = 0;
  std::unique_ptr<::testing::ScopedTrace> trace_;
};

template <typename T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer<T> d(v.size());
  d.upload(v.data());
  return d;
}
template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d) {
  std::vector<T> v(d.size());
  cuda::synchronize();
  d.download(v.data());
  return v;
}
// NaN-filled device buffer: a kernel that forgets an element shows it.
inline cuda::DeviceBuffer<float> poisoned(size_t n) {
  return to_device(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
}
inline cuda::DeviceBuffer<bf16_t> poisoned_bf16(size_t n) { return to_device(std::vector<bf16_t>(n, bf16_t{0x7fc0})); }

inline std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i].bits = f32_to_bf16(v[i]);
  return o;
}
inline std::vector<float> from_bf16(const std::vector<bf16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i].bits);
  return o;
}
// v rounded to bf16 and back: the exact inputs a bf16 kernel sees.
inline std::vector<float> bf16_round(std::vector<float> v) {
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}
inline std::vector<double> to_dbl(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Relative error of a device result against a float reference (scale = max |ref|).
inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  return max_rel_error(got, to_dbl(ref));
}

// Tolerances by precision: fp32 kernels differ from the CPU only in summation order and fast exp;
// bf16 kernels round every stored value to 8 mantissa bits (relative step 2^-8 = 0.0039).
constexpr double kTolF32 = 2e-5;
constexpr double kTolBF16 = 1.6e-2;

}  // namespace megadlm::test

#endif  // MEGADLM_HAVE_CUDA

// Registered in every build, so that a CPU-only build says why there is nothing to run.
#ifndef MEGADLM_HAVE_CUDA
#define MEGADLM_CUDA_NOT_BUILT_TEST(suite)                                                                    \
  TEST(suite, NotBuilt) {                                                                                  \
    GTEST_SKIP() << "this build has no CUDA backend (configure with -DMEGADLM_CUDA=ON, e.g. "              \
                    "scripts/build_cuda.sh): CUDA op tests skipped";                                       \
  }
#endif

#ifdef MEGADLM_HAVE_CUDA
namespace megadlm::test {

// Activations of either precision from / to float vectors: tests are written once for T = float and
// T = bf16_t. `input<T>` also returns the values the kernel actually sees (rounded for bf16), which is
// what the CPU reference must be fed.
template <typename T>
struct Act {
  static cuda::DeviceBuffer<T> up(const std::vector<float>& v);
  static std::vector<float> down(const cuda::DeviceBuffer<T>& d);
  static std::vector<float> seen(const std::vector<float>& v);
  static cuda::DeviceBuffer<T> poison(size_t n);
  static constexpr double tol();
};
template <>
struct Act<float> {
  static cuda::DeviceBuffer<float> up(const std::vector<float>& v) { return to_device(v); }
  static std::vector<float> down(const cuda::DeviceBuffer<float>& d) { return to_host(d); }
  static std::vector<float> seen(const std::vector<float>& v) { return v; }
  static cuda::DeviceBuffer<float> poison(size_t n) { return poisoned(n); }
  static constexpr double tol() { return kTolF32; }
};
template <>
struct Act<bf16_t> {
  static cuda::DeviceBuffer<bf16_t> up(const std::vector<float>& v) { return to_device(to_bf16(v)); }
  static std::vector<float> down(const cuda::DeviceBuffer<bf16_t>& d) { return from_bf16(to_host(d)); }
  static std::vector<float> seen(const std::vector<float>& v) { return bf16_round(v); }
  static cuda::DeviceBuffer<bf16_t> poison(size_t n) { return poisoned_bf16(n); }
  static constexpr double tol() { return kTolBF16; }
};

}  // namespace megadlm::test
#endif
