// Data parallelism: gradient buckets (layout, overlap hook order, the dp mean), the global gradient
// norm, the distributed optimizer against plain AdamW, and the layout checks. Tests named
// DataParallelMpi.* need two ranks: ctest runs them under `mpirun -np 2` (mpi_dp_np2); run alone
// they skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/cli_flags.h"
#include "checkpoint/reshard.h"
#include "models/language_model.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "nn/moe/moe_layer.h"
#include "optim/adamw.h"
#include "optim/distributed_optimizer.h"
#include "parallel/grad_buckets.h"
#include "parallel/grad_norm.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "test_util.h"
#include "train/parallel_arguments.h"

using namespace megadlm;

namespace {

using test::error_of;
// A store of awkwardly sized parameters, some marked expert, with random values and gradients.
void make_store(ParamStore& ps, uint64_t grad_seed) {
  const int64_t sizes[] = {37, 5, 64, 3, 129, 17, 1, 250, 33, 8};
  for (int i = 0; i < 10; ++i) {
    const int id = ps.add("p" + std::to_string(i), {sizes[i]}, Init::Normal, 0.5f, i % 3 != 0);
    if (i == 4 || i == 5 || i == 8) ps.set_expert(id);
  }
  ps.finalize();
  ps.init(11);
  const std::vector<float> g = test::random_vector(ps.numel(), grad_seed);
  for (const ParamInfo& p : ps.infos())
    std::copy(g.begin() + p.offset, g.begin() + p.offset + p.shape.numel(), ps.grads() + p.offset);
}

// Gradients g (laid out like the store) on the parameters; the alignment padding stays zero as in
// training.
void set_grads(ParamStore& ps, const std::vector<float>& g) {
  ps.zero_grads();
  for (const ParamInfo& p : ps.infos())
    std::copy(g.begin() + p.offset, g.begin() + p.offset + p.shape.numel(), ps.grads() + p.offset);
}

double reference_norm_sq(const ParamStore& ps) {
  double s = 0;
  for (const ParamInfo& p : ps.infos())
    for (int64_t i = 0; i < p.shape.numel(); ++i) s += double(ps.grads()[p.offset + i]) * ps.grads()[p.offset + i];
  return s;
}

}  // namespace

TEST(GradBuckets, CoverEveryParameterOnceInBackwardOrderAndNeverMixKinds) {
  ParamStore ps;
  make_store(ps, 1);
  for (int64_t bucket : {1, 40, 100, 100000}) {
    GradBuckets b(ps, ParallelContext::single(), bucket, true);
    std::vector<int> seen(ps.count(), 0);
    int prev_first = ps.count();
    for (int i = 0; i < b.num_buckets(); ++i) {
      const int f = b.bucket_first_param(i), l = b.bucket_last_param(i);
      EXPECT_EQ(l, prev_first - 1) << "bucket " << i << " at size " << bucket;  // contiguous, descending
      prev_first = f;
      int64_t elems = 0;
      for (int p = f; p <= l; ++p) {
        ++seen[p];
        EXPECT_EQ(ps.info(p).expert, ps.info(l).expert) << "bucket " << i << " mixes dense and expert";
        elems += ps.info(p).shape.numel();
      }
      // Full means: the bucket closed at the first parameter that reached the size.
      EXPECT_LT(elems - ps.info(f).shape.numel(), bucket) << "bucket " << i;
    }
    EXPECT_EQ(prev_first, 0);
    for (int p = 0; p < ps.count(); ++p) EXPECT_EQ(seen[p], 1) << "parameter " << p;
  }
}

TEST(GradBuckets, SingleRankFinishLeavesGradientsUntouched) {
  ParamStore ps;
  make_store(ps, 2);
  std::vector<float> before(ps.grads(), ps.grads() + ps.numel());
  GradBuckets b(ps, ParallelContext::single(), 50, true);
  b.arm();
  for (int k = ps.count(); k >= 0; --k) b.grads_ready(k);
  b.finish();
  for (int64_t i = 0; i < ps.numel(); ++i) ASSERT_EQ(ps.grads()[i], before[i]);
}

TEST(GradBuckets, ModelCallsTheGradsReadyHookWithDecreasingIdsEndingAtZero) {
  TransformerConfig c;
  c.num_layers = 3;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 8;
  c.ffn_hidden_size = 64;
  c.vocab_size = 48;
  c.max_position_embeddings = 16;
  LanguageModel m(c, gpt_model_spec(c), ParallelContext::single());
  m.params().init(3);
  std::vector<int> calls;
  m.set_grads_ready_hook([&](int k) { calls.push_back(k); });
  const int64_t B = 2, T = 5;
  std::vector<int32_t> tok(B * T), pos(B * T), tgt(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tok[i] = static_cast<int32_t>((i * 7) % 48);
    pos[i] = static_cast<int32_t>(i % T);
    tgt[i] = static_cast<int32_t>((i * 5 + 1) % 48);
  }
  MicroBatch mb;
  mb.B = B;
  mb.T = T;
  mb.tokens = tok;
  mb.positions = pos;
  mb.targets = tgt;
  m.forward_backward(mb, 1.0f);
  ASSERT_EQ(calls.size(), 5u);  // final norm, 3 layers, the end
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_LT(calls[i], calls[i - 1]);
  EXPECT_EQ(calls.back(), 0);
  EXPECT_EQ(m.params().info(calls[0]).name, "norm.weight");
  EXPECT_EQ(m.params().info(calls[3]).name.rfind("layers.0.", 0), 0u);
}

TEST(GradNorm, SingleProcessEqualsDoubleReference) {
  ParamStore ps;
  make_store(ps, 3);
  const double ref = reference_norm_sq(ps);
  EXPECT_NEAR(global_grad_norm_sq(ps, ParallelContext::single()), ref, 1e-12 * ref);
  // A sub-range read from a separate buffer (the distributed optimizer's shard).
  GradNormOptions o;
  o.begin = 40;
  o.end = 300;
  std::vector<float> shard(ps.grads() + 40, ps.grads() + 300);
  o.grads = shard.data();
  o.grads_offset = 40;
  double part = 0;
  for (const ParamInfo& p : ps.infos())
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      const int64_t e = p.offset + i;
      if (e >= 40 && e < 300) part += double(ps.grads()[e]) * ps.grads()[e];
    }
  EXPECT_NEAR(global_grad_norm_sq(ps, ParallelContext::single(), o), part, 1e-12 * part);
}

TEST(DistributedOptimizer, OneRankIsBitwiseAdamW) {
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  cfg.clip_grad = 0.5f;
  ParamStore a, b;
  make_store(a, 4);
  make_store(b, 4);
  AdamW plain(a, cfg);
  DistributedOptimizer dist(b, cfg, ParallelContext::single());
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = test::random_vector(a.numel(), 100 + step);
    set_grads(a, g);
    set_grads(b, g);
    plain.apply(1e-2, plain.grad_norm());
    dist.reduce_scatter_grads();
    dist.apply(1e-2, dist.grad_norm());
  }
  for (const ParamInfo& p : a.infos())
    for (int64_t i = 0; i < p.shape.numel(); ++i)
      ASSERT_EQ(a.values()[p.offset + i], b.values()[p.offset + i]) << p.name << "[" << i << "]";
  AdamW full(b, cfg);
  dist.gather_state(full);
  EXPECT_EQ(full.steps_taken(), 3);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(full.exp_avg().data<float>()[i], plain.exp_avg().data<float>()[i]);
}

TEST(ParallelArgs, LayoutErrorsNameTheFlagAndTheSizes) {
  TransformerConfig c;
  c.num_layers = 6;
  c.num_attention_heads = 6;
  c.num_query_groups = 3;
  c.kv_channels = 8;
  c.hidden_size = 48;
  c.ffn_hidden_size = 96;
  c.vocab_size = 96;
  auto err = [&](int tp, int pp, int ep, int world, int64_t micro = 1, int64_t global = 12) {
    ParallelArgs p;
    p.layout = ParallelLayout{tp, pp, 1, ep};
    return error_of([&] { validate_parallel_layout(p, world, c, micro, global); });
  };
  EXPECT_EQ(err(3, 2, 1, 6), "");
  EXPECT_NE(err(4, 1, 1, 6).find("--tensor-model-parallel-size 4"), std::string::npos);  // world 6
  EXPECT_NE(err(2, 1, 1, 2).find("--num-query-groups 3"), std::string::npos);
  EXPECT_NE(err(1, 4, 1, 4).find("--num-layers 6"), std::string::npos);
  c.num_query_groups = 12;
  c.num_attention_heads = 12;
  c.ffn_hidden_size = 90;
  EXPECT_NE(err(4, 1, 1, 4).find("--ffn-hidden-size 90"), std::string::npos);
  c.ffn_hidden_size = 96;
  c.vocab_size = 90;  // split 23, 23, 22, 22 over tp 4 (core/parameters.h: balanced_rows)
  EXPECT_EQ(err(4, 1, 1, 4), "");
  c.vocab_size = 3;  // a row for every tp rank at least
  EXPECT_NE(err(4, 1, 1, 4).find("padded vocabulary 3"), std::string::npos);
  c.vocab_size = 96;
  EXPECT_NE(err(1, 1, 2, 2).find("--expert-model-parallel-size 2"), std::string::npos);  // dense model
  EXPECT_NE(err(1, 1, 1, 4, 2, 12).find("--global-batch-size 12"), std::string::npos);   // 12 % (2 x 4)
}

// --context-parallel-size is read (and checked against the world, which has one rank here).
TEST(ParallelArgs, ContextParallelSizeIsReadAndCheckedAgainstTheWorld) {
  CliFlags f("x", "");
  declare_parallel_flags(f);
  std::vector<std::string> args = {"--context-parallel-size", "2"};
  f.parse(args);
  ParallelArgs p;
  const std::string e = error_of([&] { read_parallel_flags(f, p); });
  EXPECT_NE(e.find("--context-parallel-size 2"), std::string::npos) << e;
  EXPECT_EQ(e.find("not supported"), std::string::npos) << e;
}

// A MoE model's router needs all of a layer's tokens: cp with --num-experts is refused by name.
TEST(ParallelArgs, ContextParallelTakesTokenChoiceMoEOnly) {
  TransformerConfig c;
  c.num_layers = 2;
  c.num_attention_heads = 2;
  c.num_query_groups = 2;
  c.vocab_size = 64;
  c.moe.num_experts = 4;
  ParallelArgs p;
  p.layout.cp = 2;
  EXPECT_EQ(error_of([&] { validate_parallel_layout(p, 2, c, 1, 1); }), "");
  c.moe.capacity_factor = 1.25;
  std::string e = error_of([&] { validate_parallel_layout(p, 2, c, 1, 1); });
  EXPECT_NE(e.find("--context-parallel-size 2"), std::string::npos) << e;
  EXPECT_NE(e.find("--moe-expert-capacity-factor"), std::string::npos) << e;
  c.moe.capacity_factor = 0;
  c.moe.router_type = MoERouterType::ExpertChoice;
  e = error_of([&] { validate_parallel_layout(p, 2, c, 1, 1); });
  EXPECT_NE(e.find("--context-parallel-size 2"), std::string::npos) << e;
  EXPECT_NE(e.find("--moe-router-type expert_choice"), std::string::npos) << e;
}

// ---- two ranks ---------------------------------------------------------------------------------

class DataParallelMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!launched_by_mpi()) GTEST_SKIP() << "needs mpirun -np 2 (ctest: mpi_dp_np2)";
    init_distributed(nullptr, nullptr);
    if (world_size() != 2) GTEST_SKIP() << "needs exactly 2 ranks, got " << world_size();
    ctx = make_parallel_context(ParallelLayout{});
  }
  ParallelContext ctx;
};

TEST_F(DataParallelMpi, BucketsAverageOverDpAndLaunchEarlyWithOverlap) {
  ParamStore ps;
  make_store(ps, 10 + ctx.dp.rank);  // each rank its own gradients
  ParamStore r0, r1;                 // both ranks' gradients, for the reference mean
  make_store(r0, 10);
  make_store(r1, 11);
  GradBuckets b(ps, ctx, 60, /*overlap=*/true);
  ASSERT_GT(b.num_buckets(), 2);
  b.arm();
  for (int k = ps.count(); k >= 0; --k) b.grads_ready(k);  // as the backward would
  EXPECT_EQ(b.launched_early(), b.num_buckets());
  b.finish();
  for (int64_t i = 0; i < ps.numel(); ++i)
    ASSERT_FLOAT_EQ(ps.grads()[i], 0.5f * (r0.grads()[i] + r1.grads()[i])) << i;
  EXPECT_GT(ctx.dp.communicator().stats().bytes_sent, 0);
  EXPECT_GT(ctx.dp.communicator().stats().calls, 0);
}

TEST_F(DataParallelMpi, DistributedOptimizerMatchesAdamWOnTheMeanGradient) {
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  cfg.clip_grad = 0.3f;
  ParamStore mine, ref;
  make_store(mine, 20);  // numel is not a multiple of 2 x 16: exercises the padded shard
  make_store(ref, 20);
  AdamW plain(ref, cfg);
  DistributedOptimizer dist(mine, cfg, ctx);
  EXPECT_EQ(dist.shard_end() - dist.shard_begin(), ctx.dp.rank == 0 ? (mine.numel() + 1) / 2 : mine.numel() / 2);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g0 = test::random_vector(mine.numel(), 200 + step);
    const std::vector<float> g1 = test::random_vector(mine.numel(), 300 + step);
    const std::vector<float>& g = ctx.dp.rank == 0 ? g0 : g1;
    set_grads(mine, g);
    std::vector<float> mean(g0.size());
    for (size_t i = 0; i < mean.size(); ++i) mean[i] = (g0[i] + g1[i]) * 0.5f;
    set_grads(ref, mean);
    const double ref_norm = plain.grad_norm();
    plain.apply(2e-2, ref_norm);
    dist.reduce_scatter_grads();
    const double norm = dist.grad_norm();
    EXPECT_NEAR(norm, ref_norm, 1e-9 * ref_norm);
    dist.apply(2e-2, norm);
  }
  for (int64_t i = 0; i < mine.numel(); ++i)
    ASSERT_NEAR(mine.values()[i], ref.values()[i], 1e-6 * (1 + std::fabs(ref.values()[i]))) << i;
  // Checkpoint round trip: gathered moments are the plain optimizer's; scattering them back restores.
  AdamW full(mine, cfg);
  dist.gather_state(full);
  for (int64_t i = 0; i < mine.numel(); ++i)
    ASSERT_NEAR(full.exp_avg_sq().data<float>()[i], plain.exp_avg_sq().data<float>()[i],
                1e-6 * (1e-12 + plain.exp_avg_sq().data<float>()[i]));
  DistributedOptimizer again(mine, cfg, ctx);
  again.scatter_state(full);
  EXPECT_EQ(again.steps_taken(), 3);
}

TEST_F(DataParallelMpi, ShardedGradNormEqualsTheFullNorm) {
  ParamStore ps;
  make_store(ps, 30);  // the same gradients on both ranks
  const double full = reference_norm_sq(ps);
  const int64_t half = ps.numel() / 2;
  GradNormOptions o;
  o.begin = ctx.dp.rank == 0 ? 0 : half;
  o.end = ctx.dp.rank == 0 ? half : ps.numel();
  o.sharded_over_dp = true;
  EXPECT_NEAR(global_grad_norm_sq(ps, ctx, o), full, 1e-12 * full);
  EXPECT_NEAR(global_grad_norm_sq(ps, ctx), full, 1e-12 * full);  // replicated: counted once
}

// Expert parallelism: a MoE layer with its 4 experts split over 2 ranks gives, on each rank's own
// tokens, the outputs and input gradients of the whole single-process layer, and each expert's
// gradient is the sum of what both ranks' tokens contribute to it.
TEST_F(DataParallelMpi, ExpertParallelLayerMatchesTheSingleProcessLayer) {
  TransformerConfig c;
  c.hidden_size = 24;
  c.ffn_hidden_size = 40;
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.aux_loss_coeff = 0.01f;
  const ParallelContext ep_ctx = make_parallel_context(ParallelLayout{1, 1, 1, 2});
  ASSERT_EQ(ep_ctx.ep.size, 2);
  ParamStore split_store, full_store;
  MoELayer split(split_store, ep_ctx, "layers.0.mlp", c, c.activation, 0.02f);
  MoELayer full(full_store, ParallelContext::single(), "layers.0.mlp", c, c.activation, 0.02f);
  split_store.finalize();
  full_store.finalize();
  split_store.init(5);
  full_store.init(5);
  const int64_t N = 13, C = c.hidden_size;
  Arena arena_s, arena_f;
  BatchInfo info{1, N, nullptr, nullptr};
  std::vector<float> x[2], dy[2];
  for (int r = 0; r < 2; ++r) {
    x[r] = test::random_vector(N * C, 40 + r);
    dy[r] = test::random_vector(N * C, 50 + r);
  }
  const int me = ep_ctx.ep.rank;
  // The split layer on this rank's tokens.
  Tensor xs = Tensor::borrow(x[me].data(), {N, C}, DType::F32);
  Tensor ys = split.forward(arena_s, xs, info);
  std::vector<float> y_split(ys.data<float>(), ys.data<float>() + N * C);
  Tensor dys = Tensor::borrow(dy[me].data(), {N, C}, DType::F32);
  std::vector<float> dx_split(N * C, NAN);
  Tensor dxs = Tensor::borrow(dx_split.data(), {N, C}, DType::F32);
  split.backward(arena_s, dys, dxs);
  // The whole layer on both ranks' tokens, one after the other (gradients accumulate).
  std::vector<float> y_full, dx_full(N * C, NAN);
  for (int r = 0; r < 2; ++r) {
    Tensor xf = Tensor::borrow(x[r].data(), {N, C}, DType::F32);
    Tensor yf = full.forward(arena_f, xf, info);
    if (r == me) y_full.assign(yf.data<float>(), yf.data<float>() + N * C);
    std::vector<float> dxr(N * C, NAN);
    Tensor dxf = Tensor::borrow(dxr.data(), {N, C}, DType::F32);
    Tensor dyf = Tensor::borrow(dy[r].data(), {N, C}, DType::F32);
    full.backward(arena_f, dyf, dxf);
    if (r == me) dx_full = dxr;
    arena_f.reset();
  }
  for (int64_t i = 0; i < N * C; ++i) {
    ASSERT_NEAR(y_split[i], y_full[i], 1e-5f * (1 + std::fabs(y_full[i]))) << i;
    ASSERT_NEAR(dx_split[i], dx_full[i], 1e-5f * (1 + std::fabs(dx_full[i]))) << i;
  }
  // Experts: this rank holds experts 2 me, 2 me + 1, by their global names.
  int experts_here = 0;
  for (const ParamInfo& p : split_store.infos()) {
    const int f = full_store.find(p.name);
    ASSERT_GE(f, 0) << p.name;
    if (!p.expert) continue;
    ++experts_here;
    const bool mine = p.name.find(".experts." + std::to_string(2 * me) + ".") != std::string::npos ||
                      p.name.find(".experts." + std::to_string(2 * me + 1) + ".") != std::string::npos;
    EXPECT_TRUE(mine) << p.name;
    const float* gs = split_store.grads() + p.offset;
    const float* gf = full_store.grads() + full_store.info(f).offset;
    for (int64_t i = 0; i < p.shape.numel(); ++i)
      ASSERT_NEAR(gs[i], gf[i], 1e-5f * (1 + std::fabs(gf[i]))) << p.name << "[" << i << "]";
  }
  EXPECT_GT(experts_here, 0);
  EXPECT_GT(ep_ctx.ep.communicator().stats().bytes_sent, 0);
}

// Checkpoints across layouts: pieces of a tp2-like split (rows, columns, a replicated vector, and a
// parameter only rank 1 holds, like a later pipeline stage's) gathered on rank 0 are exactly the
// single-process tensors; taking the pieces back out of a full store gives each rank its init.
// Expert parallelism (dp = ep = 2): each rank holds one of the two experts, named by its global index;
// the gathered full store holds both, the replicated parameter once, and loading hands each rank its own.
TEST_F(DataParallelMpi, ReshardGathersEveryExpertParallelRanksExperts) {
  const ParallelContext ctx = make_parallel_context(ParallelLayout{1, 1, 1, 2});
  ASSERT_EQ(ctx.ep.size, 2);
  auto build = [&](ParamStore& ps, bool full) {
    ps.add("dense.weight", {6}, Init::Normal, 1.0f);
    for (int e = 0; e < 2; ++e)
      if (full || e == ctx.ep.rank) ps.add("experts." + std::to_string(e) + ".weight", {3, 4}, Init::Normal, 1.0f);
    ps.finalize();
  };
  ParamStore local, full_ref, full;
  build(local, false);
  build(full_ref, true);
  build(full, true);
  local.init(5);
  full_ref.init(5);
  std::fill(full.values(), full.values() + full.numel(), NAN);
  gather_full_state(local, {}, ctx, ctx.world_rank == 0 ? &full : nullptr, {});
  if (ctx.world_rank == 0) {
    for (const ParamInfo& p : full.infos())
      for (int64_t i = 0; i < p.shape.numel(); ++i)
        ASSERT_EQ(full.values()[p.offset + i], full_ref.values()[p.offset + i]) << p.name << "[" << i << "]";
  }
  ParamStore back;
  build(back, false);
  std::fill(back.values(), back.values() + back.numel(), NAN);
  take_local_state(full_ref, {}, back, {});
  for (const ParamInfo& p : back.infos())
    for (int64_t i = 0; i < p.shape.numel(); ++i)
      ASSERT_EQ(back.values()[p.offset + i], local.values()[p.offset + i]) << p.name << "[" << i << "]";
}

TEST_F(DataParallelMpi, ReshardGathersAndSlicesByFullIndex) {
  const ParallelContext tp_ctx = make_parallel_context(ParallelLayout{2, 1, 1, 1});
  ASSERT_EQ(tp_ctx.tp.size, 2);
  const int r = tp_ctx.tp.rank;
  auto build = [&](ParamStore& ps, bool full) {
    const int parts = full ? 1 : 2, part = full ? 0 : r;
    ps.add_sharded("col.weight", {6, 5}, 0, parts, part, Init::Normal, 1.0f);
    ps.add_sharded("row.weight", {3, 8}, 1, parts, part, Init::Normal, 1.0f);
    ps.add("norm.weight", {7}, Init::Normal, 1.0f);
    // Two fused blocks (SwiGLU's gate and up): [2, 4, 5] split along the rows of each block on a rank,
    // [8, 5] in the single-process model, the same elements in the same order.
    if (full) ps.add_sharded("fused.weight", {8, 5}, 0, 1, 0, Init::Normal, 1.0f);
    else ps.add_sharded("fused.weight", {2, 4, 5}, 1, 2, r, Init::Normal, 1.0f);
    if (full || r == 1) ps.add("last.weight", {4, 3}, Init::Normal, 1.0f);
    ps.finalize();
  };
  ParamStore local, full_ref;
  build(local, false);
  build(full_ref, true);
  local.init(21);
  full_ref.init(21);
  // Moments: a recognisable function of the full element index.
  std::vector<float> m(local.numel(), 0.0f), v(local.numel(), 0.0f);
  for (const ParamInfo& p : local.infos())
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      m[p.offset + i] = static_cast<float>(p.global_index(i)) + 0.5f;
      v[p.offset + i] = -static_cast<float>(p.global_index(i));
    }
  ParamStore full;
  build(full, true);
  std::vector<float> fm(full.numel(), NAN), fv(full.numel(), NAN);
  gather_full_state(local, {m.data(), v.data()}, tp_ctx, r == 0 ? &full : nullptr, {fm.data(), fv.data()});
  if (tp_ctx.world_rank == 0) {
    for (const ParamInfo& p : full.infos()) {
      const ParamInfo& q = full_ref.info(full_ref.find(p.name));
      for (int64_t i = 0; i < p.shape.numel(); ++i) {
        ASSERT_EQ(full.values()[p.offset + i], full_ref.values()[q.offset + i]) << p.name << "[" << i << "]";
        ASSERT_EQ(fm[p.offset + i], static_cast<float>(i) + 0.5f) << p.name << "[" << i << "]";
        ASSERT_EQ(fv[p.offset + i], -static_cast<float>(i)) << p.name << "[" << i << "]";
      }
    }
  }
  // Back out: a full store initialised with another seed gives each rank its own init with that seed.
  ParamStore src, want;
  build(src, true);
  build(want, false);
  src.init(33);
  want.init(33);
  std::vector<float> sm(src.numel(), 1.0f), sv(src.numel(), 2.0f), lm(local.numel(), NAN), lv(local.numel(), NAN);
  take_local_state(src, {sm.data(), sv.data()}, local, {lm.data(), lv.data()});
  for (const ParamInfo& p : local.infos())
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      ASSERT_EQ(local.values()[p.offset + i], want.values()[p.offset + i]) << p.name << "[" << i << "]";
      ASSERT_EQ(lm[p.offset + i], 1.0f);
      ASSERT_EQ(lv[p.offset + i], 2.0f);
    }
}
