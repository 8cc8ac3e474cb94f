// MoE layer against a dense MLP with the same active parameters: 8 experts, top-2, expert ffn F, so a
// token passes through 2 experts of F = the work of a dense MLP of 2F (the router adds C x 8).
// Forward + backward time of each (median of repeated runs after warm-up), side by side, with the
// ratio to the dense MLP. Grouped (--moe-grouped-gemm) and looped experts are both timed.
//
// Then the grouped products themselves (Backend::grouped_gemm_*) against the per-expert loop of gemm calls
// (the Backend's default definition), at 8 and 16 experts with skewed loads: the 2N routed rows shared
// out geometrically (each expert a fixed fraction of the previous one's), the last expert given none.
// The six products of an SwiGLU expert layer's forward and backward, same inputs for both, with the
// ratio loop / grouped and the largest difference between their results.
//
// --sweep 1 instead runs the grouped products against the loop over a grid of smaller sizes (sweep()
// below), one table row per case.
//
// Usage: OMP_NUM_THREADS=n bench_moe [--tokens N] [--hidden C] [--ffn F] [--reps R] [--products-only 1]
//        OMP_NUM_THREADS=n bench_moe --sweep 1
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/log.h"
#include "core/philox.h"
#include "kernels/backend.h"
#include "nn/mlp.h"
#include "nn/moe/moe_layer.h"

#include "expert_products.h"

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
  const std::vector<float> v = bench::uniform_values(n, seed, std);
  std::copy(v.begin(), v.end(), x);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

using ExpertProducts = bench::ExpertProducts<bench::HostStore>;
using bench::skewed_offsets;

void print_products_header(int64_t P, int64_t C, int64_t F) {
  std::printf("Grouped expert products vs the per-expert gemm loop, SwiGLU (fc1 [%lld, %lld], fc2 [%lld, %lld]), "
              "P = %lld routed rows, %d OpenMP threads\n",
              static_cast<long long>(2 * F), static_cast<long long>(C), static_cast<long long>(C),
              static_cast<long long>(F), static_cast<long long>(P), omp_get_max_threads());
}

// Times the loop and the grouped products at E experts with skewed loads and prints one table row per
// direction and one for both (each the median of `reps` runs after warm-up, the loop then the grouped ops).
void bench_grouped_products(int64_t E, double ratio, int64_t P, int64_t C, int64_t F, int reps) {
  const Backend& be = cpu_backend();
  ExpertProducts ep(E, skewed_offsets(E, P, ratio), C, F);
  const double diff = max_abs_diff(ep.outputs(be, false), ep.outputs(be, true));
  std::string loads;
  for (int64_t e = 0; e < E; ++e) loads += (e ? " " : "") + std::to_string(ep.off[e + 1] - ep.off[e]);
  std::printf("\n%lld experts, skewed loads (rows per expert): %s\n", static_cast<long long>(E), loads.c_str());
  const auto fwd = [&](bool g) { ep.forward(be, g); };
  const auto bwd = [&](bool g) { ep.backward(be, g); };
  const auto both = [&](bool g) { ep.forward(be, g), ep.backward(be, g); };
  std::printf("%-22s %12s %12s %10s\n", "products", "loop (ms)", "grouped (ms)", "loop/grp");
  for (const auto& part : std::vector<std::pair<const char*, std::function<void(bool)>>>{
           {"forward (2)", fwd}, {"backward (4)", bwd}, {"forward + backward", both}}) {
    const char* name = part.first;
    const std::function<void(bool)>& fn = part.second;  // a named reference: lambdas may capture it
    const double t_loop = median_seconds([&] { fn(false); }, reps);
    const double t_grp = median_seconds([&] { fn(true); }, reps);
    std::printf("%-22s %12.2f %12.2f %10.2f\n", name, 1e3 * t_loop, 1e3 * t_grp, t_loop / t_grp);
  }
  // How well the loop's own products use the threads: what a grouped pass can win is at most the gap.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double t_loop1 = median_seconds([&] { both(false); }, reps);
  omp_set_num_threads(threads);
  std::printf("loop on 1 thread: %.2f ms, so the loop on %d threads runs %.2fx faster than on 1\n", 1e3 * t_loop1,
              threads, t_loop1 / median_seconds([&] { both(false); }, reps));
  std::printf("results agree: largest |loop - grouped| over every output %.3g\n", diff);
}

// Medians of a and b timed in alternation (a, b, a, b, ...) after two warm-up runs of each, so that
// whatever else the machine runs meanwhile falls on both alike.
std::pair<double, double> paired_median_seconds(const std::function<void()>& a, const std::function<void()>& b,
                                                int reps) {
  for (int i = 0; i < 2; ++i) a(), b();
  std::vector<double> ta, tb;
  for (int i = 0; i < reps; ++i) {
    Timer t1;
    a();
    ta.push_back(t1.seconds());
    Timer t2;
    b();
    tb.push_back(t2.seconds());
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

// Repetitions for a measurement of about `budget` seconds, given one run's time (3 at least, 60 at most).
int reps_for(double one_run, double budget) {
  return static_cast<int>(std::clamp(budget / std::max(one_run, 1e-6), 3.0, 60.0));
}

// One case of the sweep: E experts, hidden C, expert ffn F, P = tokens x top-k routed rows, skewed loads.
struct SweepCase {
  int64_t E, C, F, tokens, topk;
  double ratio;  // each expert's share over the previous one's; the last expert gets none
};

// One row per case: loop / grouped for the forward's two products, the backward's two input-gradient and
// two weight-gradient products and all six together (each timed in turn, same inputs), the loop's own
// 1 -> n thread speed-up (the most any single-pass scheme can add over it on n threads is that gap), and
// the largest difference between the two paths' outputs.
void sweep_case(const SweepCase& c) {
  const Backend& be = cpu_backend();
  const int64_t P = c.tokens * c.topk;
  ExpertProducts ep(c.E, skewed_offsets(c.E, P, c.ratio), c.C, c.F);
  const double diff = max_abs_diff(ep.outputs(be, false), ep.outputs(be, true));
  int64_t max_load = 0, small = 0;
  for (int64_t e = 0; e < c.E; ++e) {
    const int64_t n = ep.off[e + 1] - ep.off[e];
    max_load = std::max(max_load, n);
    small += n < 16 ? 1 : 0;
  }
  const auto both = [&](bool g) { ep.forward(be, g), ep.backward(be, g); };
  Timer probe;
  both(false);
  const double one = probe.seconds();
  const auto ratio = [&](const std::function<void(bool)>& fn, double share, double* loop_s, double* grp_s) {
    const auto [l, g] = paired_median_seconds([&] { fn(false); }, [&] { fn(true); }, reps_for(one * share, 0.3));
    if (loop_s) *loop_s = l;
    if (grp_s) *grp_s = g;
    return l / g;
  };
  const double r_fwd = ratio([&](bool g) { ep.forward(be, g); }, 0.33, nullptr, nullptr);
  const double r_bd = ratio([&](bool g) { ep.backward_data(be, g); }, 0.33, nullptr, nullptr);
  const double r_bw = ratio([&](bool g) { ep.backward_weight(be, g); }, 0.33, nullptr, nullptr);
  double t_loop = 0, t_grp = 0;
  const double r_all = ratio(both, 1.0, &t_loop, &t_grp);
  const int threads = omp_get_max_threads();
  const auto on_one_thread = [&] {
    omp_set_num_threads(1);
    both(false);
    omp_set_num_threads(threads);
  };
  const auto [t_loop1, t_loop_n] =
      paired_median_seconds(on_one_thread, [&] { both(false); }, reps_for(one * (threads + 1), 0.5));
  std::printf("%3lld %4lld %5lld %5lld %2lld %5lld %5lld %3lld %7.2f %7.2f %7.2f %9.3f %9.3f %7.2f %7.2f %9.2g\n",
              static_cast<long long>(c.E), static_cast<long long>(c.C), static_cast<long long>(c.F),
              static_cast<long long>(c.tokens), static_cast<long long>(c.topk), static_cast<long long>(P),
              static_cast<long long>(max_load), static_cast<long long>(small), r_fwd, r_bd, r_bw, 1e3 * t_loop,
              1e3 * t_grp, r_all, t_loop1 / t_loop_n, diff);
  std::fflush(stdout);
}

// The sizes a CPU MoE run of this framework trains: hidden 128..512, fine-grained expert ffn 64..1024,
// 256..4096 routed rows (tokens x top-k, top-k 1..8), 8 and 16 experts with skewed loads.
void sweep() {
  std::printf("Sweep: grouped expert products vs the per-expert gemm loop, SwiGLU (fc1 [2F, C], fc2 [C, F]), "
              "%d OpenMP threads\n",
              omp_get_max_threads());
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) std::printf("load average at the start: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
  std::printf("loads skewed geometrically (ratio 0.6 at 8 experts, 0.75 at 16), the last expert none; "
              "max = largest load, <16 = experts under 16 rows\n");
  std::printf("loop/grp per part: fwd = the 2 forward products, bwd-dX = the 2 input-gradient, bwd-dW = the 2 "
              "weight-gradient products; all = the 6 together (ms each path); 1->%d = the loop's own speed-up "
              "from 1 to %d threads; timings: medians of the two paths run in alternation\n",
              omp_get_max_threads(), omp_get_max_threads());
  std::printf("%3s %4s %5s %5s %2s %5s %5s %3s %7s %7s %7s %9s %9s %7s %7s %9s\n", "E", "C", "F", "tok", "k", "P",
              "max", "<16", "fwd", "bwd-dX", "bwd-dW", "loop ms", "grp ms", "all", "1->n", "max diff");
  const std::vector<std::pair<int64_t, int64_t>> rows = {{256, 1}, {512, 2}, {512, 8}};  // tokens, top-k
  for (int64_t E : {8, 16})
    for (int64_t C : {128, 256, 512})
      for (int64_t F : {64, 256, 1024})
        for (const auto& [tokens, k] : rows) sweep_case({E, C, F, tokens, k, E == 8 ? 0.6 : 0.75});
}

}  // namespace

int main(int argc, char** argv) {
  int64_t N = 2048, C = 512, F = 1024;
  int reps = 7;
  bool products_only = false, run_sweep = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (a == "--tokens") N = v;
    else if (a == "--hidden") C = v;
    else if (a == "--ffn") F = v;
    else if (a == "--reps") reps = static_cast<int>(v);
    else if (a == "--products-only") products_only = v != 0;
    else if (a == "--sweep") run_sweep = v != 0;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (run_sweep) {
    sweep();
    return 0;
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

  if (products_only) {
    print_products_header(N * k, C, F);
    bench_grouped_products(8, 0.6, N * k, C, F, reps);
    bench_grouped_products(16, 0.75, N * k, C, F, reps);
    return 0;
  }
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

  std::printf("\n");
  print_products_header(N * k, C, F);
  bench_grouped_products(8, 0.6, N * k, C, F, reps);
  bench_grouped_products(16, 0.75, N * k, C, F, reps);
  return 0;
}
