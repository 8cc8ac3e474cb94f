// MoE layer against a dense MLP with the same active parameters: 8 experts, top-2, expert ffn F, so a
// token passes through 2 experts of F = the work of a dense MLP of 2F (the router adds C x 8).
// Forward + backward time of each (median of repeated runs after warm-up), side by side, with the
// ratio to the dense MLP. Grouped (--moe-grouped-gemm) and looped experts are both timed.
//
// Usage: OMP_NUM_THREADS=n bench_moe [--tokens N] [--hidden C] [--ffn F] [--reps R]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/philox.h"
#include "nn/mlp.h"
#include "nn/moe/moe_layer.h"

using namespace megadlm;

namespace {

double median_seconds(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 2; ++i) fn();  // warm-up: arena sizing, oneDNN primitive creation
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Timer timer;
    fn();
    t.push_back(timer.seconds());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void fill_normal(float* x, int64_t n, uint64_t seed, float std) {
  CounterRng rng(seed, RngPurpose::Test);
  for (int64_t i = 0; i < n; ++i) x[i] = std * (rng.uniform(i, 0) * 2.0f - 1.0f) * 1.7320508f;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t N = 2048, C = 512, F = 1024;
  int reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (a == "--tokens") N = v;
    else if (a == "--hidden") C = v;
    else if (a == "--ffn") F = v;
    else if (a == "--reps") reps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const int64_t E = 8, k = 2;
  const ParallelContext ctx = ParallelContext::single();
  TransformerConfig cfg;
  cfg.hidden_size = C;
  cfg.ffn_hidden_size = k * F;
  cfg.add_bias_linear = false;
  cfg.activation = Activation::SwiGLU;
  cfg.moe.num_experts = E;
  cfg.moe.topk = k;
  cfg.moe.ffn_hidden_size = F;
  cfg.moe.aux_loss_coeff = 1e-2f;

  std::vector<float> x(N * C), dy(N * C);
  fill_normal(x.data(), N * C, 1, 1.0f);
  fill_normal(dy.data(), N * C, 2, 1e-3f);
  Tensor xt = Tensor::borrow(x.data(), {N, C}, DType::F32);
  Tensor dyt = Tensor::borrow(dy.data(), {N, C}, DType::F32);
  const BatchInfo info{1, N, nullptr, nullptr};

  // dense MLP of 2F
  ParamStore dense_store;
  MLP dense(dense_store, ctx, "mlp", cfg, cfg.activation, k * F, 0.02f);
  dense_store.finalize();
  dense_store.init(1234);
  Arena arena;
  auto run_dense = [&] {
    Tensor y = dense.forward(arena, xt);
    Tensor dx = arena.tensor({N, C});
    dense.backward(arena, dyt, dx);
    arena.reset();
  };

  ParamStore moe_store;
  MoELayer moe(moe_store, ctx, "mlp", cfg, cfg.activation, 0.02f);
  moe_store.finalize();
  moe_store.init(1234);
  int64_t max_load = 0;
  auto run_moe = [&] {
    Tensor y = moe.forward(arena, xt, info);
    for (int64_t t : moe.last_routing().tokens_per_expert) max_load = std::max(max_load, t);
    Tensor dx = arena.tensor({N, C});
    moe.backward(arena, dyt, dx);
    arena.reset();
  };

  const double t_dense = median_seconds(run_dense, reps);
  moe.set_grouped_gemm(true);
  const double t_grouped = median_seconds(run_moe, reps);
  moe.set_grouped_gemm(false);
  const double t_looped = median_seconds(run_moe, reps);

  const double dense_flops = 6.0 * static_cast<double>(N) * (3.0 * static_cast<double>(C * k * F));
  std::printf("MoE vs dense MLP, forward + backward, SwiGLU, fp32, %d OpenMP threads\n", omp_get_max_threads());
  std::printf("tokens N=%lld, hidden C=%lld; MoE: %lld experts of ffn %lld, top-%lld (largest expert load %lld tokens "
              "= %.2fx the mean); dense: ffn %lld (same active parameters)\n",
              static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(E),
              static_cast<long long>(F), static_cast<long long>(k), static_cast<long long>(max_load),
              static_cast<double>(max_load) / (static_cast<double>(N * k) / E), static_cast<long long>(k * F));
  std::printf("%-26s %12s %12s %10s\n", "block", "time (ms)", "GFLOP/s*", "vs dense");
  std::printf("%-26s %12.2f %12.1f %10.2f\n", "dense MLP", 1e3 * t_dense, dense_flops / t_dense / 1e9, 1.0);
  std::printf("%-26s %12.2f %12.1f %10.2f\n", "MoE grouped GEMM", 1e3 * t_grouped, dense_flops / t_grouped / 1e9,
              t_grouped / t_dense);
  std::printf("%-26s %12.2f %12.1f %10.2f\n", "MoE looped experts", 1e3 * t_looped, dense_flops / t_looped / 1e9,
              t_looped / t_dense);
  std::printf("* the dense MLP's matrix FLOPs (6 N x active parameters) over each time\n");
  std::printf("acceptance (grouped MoE <= 1.5x dense): %s\n", t_grouped <= 1.5 * t_dense ? "met" : "NOT met");
  return 0;
}
