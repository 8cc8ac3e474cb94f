// GPU benchmark of the MoE experts' grouped products (Backend::grouped_gemm_*: one
// cublasGemmGroupedBatchedEx call per product, kernels/cuda/grouped_gemm.cpp) against the per-expert
// loop of ordinary products (the Backend's default definition: one cuBLASLt gemm_f32 launch per expert
// with rows), side by side in one process on the same device buffers: the six products of an SwiGLU
// expert layer (fc1 [2F, C], fc2 [C, F]), forward (2) and backward (2 input-gradient, 2 weight-gradient),
// at 8 and 16 experts with skewed loads (expert e gets a share proportional to ratio^e, the last none).
// Prints, per case, the loop's and the grouped time (medians over the repetitions, the two paths in
// alternation), their ratio, and the largest difference between the two paths' outputs relative to the
// largest output. fp32 products (exact fp32, no TF32) as the training modules run them.
//
//   bench_grouped_gemm [--reps 20] [--quick 1]     (--quick 1: the first case of each expert count only)
//
// Legend: E experts, C hidden, F expert ffn, P routed rows (tokens x top-k).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/ops.h"

#include "../expert_products.h"

namespace mc = megadlm::cuda;
using megadlm::Backend;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) megadlm::fail(what, ": ", cudaGetErrorString(e));
}

// The device's Store for bench::ExpertProducts: device buffers.
struct DeviceStore {
  struct Buf {
    mc::DeviceBuffer<float> b;
    float* data() { return b.get(); }
  };
  static Buf make(const std::vector<float>& values) {
    Buf d{mc::DeviceBuffer<float>(values.size())};
    d.b.upload(values.data());
    return d;
  }
  static Buf zeros(int64_t n) {
    Buf d{mc::DeviceBuffer<float>(static_cast<size_t>(n))};
    zero(d);
    return d;
  }
  static void zero(Buf& d) { mc::memset_device(d.b.get(), 0, d.b.size() * sizeof(float)); }
  static std::vector<float> read(const Buf& d) {
    std::vector<float> v(d.b.size());
    d.b.download(v.data());
    return v;
  }
};

using Experts = megadlm::bench::ExpertProducts<DeviceStore>;

// Milliseconds of one call of fn on the legacy stream, by events.
template <class Fn>
double time_ms(Fn&& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  check(cudaEventRecord(a, 0), "cudaEventRecord");
  fn();
  check(cudaEventRecord(b, 0), "cudaEventRecord");
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  int64_t E, C, F, P;
  double ratio;
};

void run_case(const Backend& be, const Case& c, int reps) {
  Experts ex(c.E, megadlm::bench::skewed_offsets(c.E, c.P, c.ratio), c.C, c.F);
  std::string loads;
  for (int64_t e = 0; e < c.E; ++e) {
    if (e) loads += ' ';
    loads += std::to_string(ex.off[e + 1] - ex.off[e]);
  }
  const std::vector<float> loop_out = ex.outputs(be, false), grp_out = ex.outputs(be, true);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < loop_out.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(loop_out[i]) - grp_out[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(loop_out[i])));
  }
  const auto step = [&](bool grouped) {
    ex.forward(be, grouped);
    ex.backward(be, grouped);
  };
  for (int w = 0; w < 2; ++w) step(w % 2 == 0);  // warm-up: cuBLAS's heuristics, the pool
  std::vector<double> t_loop, t_grp;
  for (int r = 0; r < reps; ++r) {
    t_loop.push_back(time_ms([&] { step(false); }));
    t_grp.push_back(time_ms([&] { step(true); }));
  }
  const double lm = median(t_loop), gm = median(t_grp);
  std::printf("%3lld %5lld %5lld %6lld  %9.3f %9.3f  %6.2f  %9.2e  %s\n", static_cast<long long>(c.E),
              static_cast<long long>(c.C), static_cast<long long>(c.F), static_cast<long long>(c.P), lm, gm, lm / gm,
              scale > 0 ? diff / scale : diff, loads.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_grouped_gemm: %s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--reps") reps = std::max(1, std::atoi(v));
    else if (a == "--quick") quick = std::atoi(v) != 0;
    else {
      std::fprintf(stderr, "bench_grouped_gemm: unknown flag %s (--reps N, --quick 0|1)\n", a.c_str());
      return 2;
    }
  }
  try {
    if (mc::device_count() == 0) {
      std::fprintf(stderr, "bench_grouped_gemm: no CUDA device visible\n");
      return 1;
    }
    const Backend& be = megadlm::backend_for(megadlm::Device::CUDA);
    std::printf("# bench_grouped_gemm on %s: grouped expert products (cublasGemmGroupedBatchedEx) vs the per-expert\n"
                "# loop of gemm_f32, SwiGLU experts, forward + backward (6 products), fp32, medians of %d\n",
                mc::device_name().c_str(), reps);
    std::printf("  E     C     F      P    loop ms    grp ms  loop/grp  max diff  rows per expert\n");
    // Fine-grained experts (small C and F, many launches) first, then a Qwen-MoE-like and a wider layer.
    const std::vector<Case> shapes = {{0, 1024, 512, 4096, 0}, {0, 2048, 1408, 16384, 0}, {0, 512, 1024, 4096, 0}};
    for (int64_t E : {8, 16}) {
      for (const Case& s : shapes) {
        run_case(be, Case{E, s.C, s.F, s.P, E == 8 ? 0.6 : 0.75}, reps);
        if (quick) break;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grouped_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
