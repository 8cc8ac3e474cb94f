#include "kernels/cpu/gemm_peak.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/log.h"
#include "kernels/cpu/gemm.h"

namespace megadlm::cpu {

namespace {

// The best of several products: the machine's capability, not its momentary load (a median taken
// while other processes run would understate the peak and overstate the MFU). Two shapes, because
// which one runs fastest depends on the CPU: a square 1024^3 product, and GPT-2 124M's q|k|v product
// at 1024 rows (a 2304 x 768 weight), the faster of the two on AVX2 CPUs; without it the peak there
// falls below what a training step reaches (docs/bench/decisions.md).
struct PeakShape {
  int64_t M, N, K;
};
constexpr PeakShape kPeakShapes[] = {{1024, 1024, 1024}, {1024, 2304, 768}};
constexpr int kPeakReps = 6;  // calls per shape; the first warms caches and oneDNN's JIT and is not timed

}  // namespace

static double time_gemm_peak_flops(bool bf16) {
  double best = 0;
  for (const PeakShape& s : kPeakShapes) {
    // Inputs 0.5 and 0.25 (exact in bf16 too), in the precision the product takes.
    const size_t na = static_cast<size_t>(s.M * s.K), nb = static_cast<size_t>(s.K * s.N);
    std::vector<float> a(bf16 ? 0 : na, 0.5f), b(bf16 ? 0 : nb, 0.25f), c(s.M * s.N);
    std::vector<uint16_t> ab(bf16 ? na : 0, f32_to_bf16(0.5f)), bb(bf16 ? nb : 0, f32_to_bf16(0.25f));
    for (int rep = 0; rep < kPeakReps; ++rep) {
      Timer t;
      if (bf16)
        gemm_bf16(false, true, s.M, s.N, s.K, 1.0f, ab.data(), s.K, bb.data(), s.K, 0.0f, c.data(), s.N);
      else
        gemm(false, true, s.M, s.N, s.K, 1.0f, a.data(), s.K, b.data(), s.K, 0.0f, c.data(), s.N);
      const double secs = t.seconds();
      if (rep > 0) best = std::max(best, 2.0 * s.M * s.N * s.K / secs);
    }
  }
  return best;
}

double gemm_peak_flops(bool bf16) {
  // Once per precision: --bf16's choice of path and the trainer's MFU then use the same measurement.
  // Thread-safe by the static's initialisation.
  static const double fp32 = time_gemm_peak_flops(false);
  if (!bf16) return fp32;
  static const double bf16_rate = time_gemm_peak_flops(true);
  return bf16_rate;
}

std::string gemm_peak_description() {
  std::string d;
  for (const PeakShape& s : kPeakShapes) {
    if (!d.empty()) d += " and ";
    d += s.M == s.N && s.N == s.K ? std::to_string(s.M) + "^3"
                                  : std::to_string(s.M) + " x " + std::to_string(s.N) + " x " + std::to_string(s.K);
  }
  const size_t n = sizeof kPeakShapes / sizeof kPeakShapes[0];
  return d + ", best of " + std::to_string(n * (kPeakReps - 1));
}

}  // namespace megadlm::cpu
