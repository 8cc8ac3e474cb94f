// A MoE layer under context parallelism: each cp rank holds chunks r and 2cp-1-r of every sequence
// (models/context_parallel.h) and the router sums its top-k counts over the cp group, so the layer's
// outputs, input gradients, aux and z losses and statistics are the whole sequences' ones, and its
// parameter gradients summed over cp are the one-process gradients. Runs under mpirun -np 2 and -np 4
// (ctest mpi_cp_np2, mpi_cp_np4); every rank of the world is one cp rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/hash.h"
#include "parallel/cp_rows.h"
#include "nn/moe/moe_layer.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

constexpr int64_t kB = 2, kC = 8, kF = 12, kE = 4, kTopK = 2;

TransformerConfig moe_config(MoELoadBalancing balancing) {
  TransformerConfig cfg;
  cfg.hidden_size = kC;
  cfg.ffn_hidden_size = kF;
  cfg.num_layers = 1;
  cfg.add_bias_linear = true;
  cfg.moe.num_experts = kE;
  cfg.moe.topk = kTopK;
  cfg.moe.ffn_hidden_size = kF;
  cfg.moe.load_balancing = balancing;
  cfg.moe.aux_loss_coeff = 0.1f;
  cfg.moe.z_loss_coeff = 0.01f;
  return cfg;
}

// What one run of the layer gives: y, dx (rows of this rank), the parameter gradients, the losses.
struct LayerRun {
  std::vector<float> y, dx, grads;
  double aux = 0, z = 0;
  std::vector<int64_t> tokens_per_expert;
};

// Parameters ~ U(-a, a) keyed by name and identical on every rank.
void randomize(ParamStore& store) {
  for (const ParamInfo& p : store.infos()) {
    const std::vector<float> r = random_vector(p.shape.numel(), 11 ^ fnv1a64(p.name));
    const float a = p.name.find("router") != std::string::npos ? 1.0f : 0.4f;
    float* w = store.values() + p.offset;
    for (size_t i = 0; i < r.size(); ++i) w[i] = a * r[i];
  }
}

// The layer on x [B*T, C] with dy = R: forward, backward, what it reports.
LayerRun run_layer(const ParallelContext& ctx, const TransformerConfig& cfg, int64_t T, const std::vector<float>& x,
                   const std::vector<float>& R) {
  ParamStore store;
  Arena arena;
  MoELayer layer(store, ctx, "mlp", cfg, cfg.activation, 0.02f);
  store.finalize();
  randomize(store);
  const int64_t N = kB * T;
  Tensor xt = Tensor::borrow(const_cast<float*>(x.data()), {N, kC}, DType::F32);
  const BatchInfo info{kB, T, nullptr, nullptr};
  LayerRun out;
  Tensor y = layer.forward(arena, xt, info);
  out.y.assign(y.data<float>(), y.data<float>() + N * kC);
  out.aux = layer.last_routing().aux_loss;
  out.z = layer.last_routing().z_loss;
  out.tokens_per_expert = layer.last_routing().tokens_per_expert;
  out.dx.assign(static_cast<size_t>(N * kC), 0.0f);
  Tensor dy = Tensor::borrow(const_cast<float*>(R.data()), {N, kC}, DType::F32);
  Tensor dx = Tensor::borrow(out.dx.data(), {N, kC}, DType::F32);
  layer.backward(arena, dy, dx);
  out.grads.assign(store.grads(), store.grads() + store.numel());
  return out;
}

// Rows [B, S, W] -> this rank's chunks r and 2cp-1-r of every sequence.
std::vector<float> rows_of(const std::vector<float>& full, int64_t S, int64_t W, int cp, int r) {
  return test::cp_rows_of(full, kB, S, W, cp, r);
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1e-6, m = 0;
  for (float v : b) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m / scale;
}

void check_layer(const ParallelContext& ctx, MoELoadBalancing balancing, const char* what) {
  SCOPED_TRACE(what);
  const int cp = ctx.cp.size, r = ctx.cp.rank;
  const int64_t S = 6 * cp;  // chunks of 3 rows
  const TransformerConfig cfg = moe_config(balancing);
  const std::vector<float> x = random_vector(kB * S * kC, 101);
  const std::vector<float> R = random_vector(kB * S * kC, 202);
  const LayerRun whole = run_layer(ParallelContext::single(), cfg, S, x, R);
  const LayerRun mine = run_layer(ctx, cfg, S / cp, rows_of(x, S, kC, cp, r), rows_of(R, S, kC, cp, r));

  EXPECT_LT(max_rel_diff(mine.y, rows_of(whole.y, S, kC, cp, r)), 1e-6);
  EXPECT_LT(max_rel_diff(mine.dx, rows_of(whole.dx, S, kC, cp, r)), 1e-5);
  EXPECT_NEAR(mine.aux, whole.aux, 1e-6 * std::fabs(whole.aux));
  EXPECT_NEAR(mine.z, whole.z, 1e-6 * std::fabs(whole.z));
  EXPECT_EQ(mine.tokens_per_expert, whole.tokens_per_expert);
  std::vector<float> summed = mine.grads;
  ctx.cp.communicator().all_reduce_sum(summed.data(), static_cast<int64_t>(summed.size()));
  EXPECT_LT(max_rel_diff(summed, whole.grads), 1e-5);
}

TEST(ContextParallelMpi, MoELayerIsTheWholeSequences) {
  if (!launched_by_mpi()) GTEST_SKIP() << "needs mpirun -np 2 or 4 (ctest: mpi_cp_np2, mpi_cp_np4)";
  init_distributed(nullptr, nullptr);
  ParallelLayout layout;
  layout.cp = world_size();
  const ParallelContext ctx = make_parallel_context(layout);
  ASSERT_EQ(ctx.cp.size, world_size());
  check_layer(ctx, MoELoadBalancing::AuxLoss, "aux loss over the micro-batch");
  check_layer(ctx, MoELoadBalancing::SeqAuxLoss, "aux loss per sequence");
}

}  // namespace
