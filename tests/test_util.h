#pragma once
// Helpers shared by the GoogleTest suites: deterministic random inputs, error measures, and a central
// finite-difference gradient check.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"
#include "core/philox.h"

namespace megadlm::test {

// n values uniform in [lo, hi), reproducible from `seed` (distinct seeds give distinct streams).
inline std::vector<float> random_vector(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  CounterRng rng(seed, RngPurpose::Test);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(i >> 2, 0, static_cast<int>(i & 3));
  return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// max_i |a_i - b_i| / (atol_floor + max_j |b_j|): an error relative to the reference's scale.
inline double max_rel_error(const float* a, const double* ref, int64_t n) {
  double scale = 0.0, err = 0.0;
  for (int64_t i = 0; i < n; ++i) scale = std::fmax(scale, std::fabs(ref[i]));
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(e <= err)) err = e;  // NaN propagates
  }
  return err / (scale > 1e-12 ? scale : 1.0);
}
inline double max_rel_error(const std::vector<float>& a, const std::vector<double>& ref) {
  return max_rel_error(a.data(), ref.data(), static_cast<int64_t>(ref.size()));
}

// Central differences of a scalar function f(x) with respect to x (x is restored after each probe).
// Use Real = double with a double-precision reference forward (h ~ 1e-6) for tight checks, and
// Real = float on an fp32 kernel (h ~ 1e-2, loose tolerance) as a second, independent check.
template <typename Real>
std::vector<double> numerical_gradient(std::vector<Real>& x, const std::function<double()>& loss, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const Real saved = x[i];
    x[i] = static_cast<Real>(saved + h);
    const double up = loss();
    x[i] = static_cast<Real>(saved - h);
    const double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (2.0 * h);
  }
  return g;
}

// Path to a file under ../shared/ (next to the repository), or "" when it is absent.
inline std::string shared_path(const std::string& rel) {
  const std::string p = std::string(MEGADLM_SOURCE_DIR) + "/../shared/" + rel;
  FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return "";
  std::fclose(f);
  return p;
}

// A fresh directory per test under the system temp dir (named by pid, suite, test and an optional
// tag for a test that needs several), removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::temp_directory_path() /
             ("megadlm_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name() +
              (tag.empty() ? "" : "_" + tag)))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

// The names in a directory (not recursive): to check that no temporary file was left behind.
inline std::set<std::string> entries_of(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// The message of the megadlm::Error that f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace megadlm::test

// Skips the current test with a clear message when a file from ../shared/ is missing.
#define MEGADLM_REQUIRE_SHARED(var, rel)                                                         \
  const std::string var = ::megadlm::test::shared_path(rel);                                  \
  if (var.empty()) GTEST_SKIP() << "../shared/" << rel << " is absent (a fresh clone has no shared/)"
