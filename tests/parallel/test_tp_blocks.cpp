// Tensor-parallel building blocks under `mpirun -np 2` (tp = 2), each against the single-rank module
// on the same full weights and inputs: forward output, input gradient and every parameter gradient
// (each rank checks its shard through ParamInfo), with and without sequence parallelism.
// Without mpirun every test here skips; ctest runs them as mpi_tp_np2.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/lm_head.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "test_tp_util.h"

using namespace megadlm;
using namespace megadlm::test;

namespace {

constexpr double kTol = 1e-5;

std::vector<float> copy_of(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// ---- Linear ------------------------------------------------------------------------------------

// Column-parallel: local output column j of rank r is full column col_map(j) (stacked blocks each
// split the same way).
void check_column(const ParallelContext& tp, int64_t fused) {
  const int64_t N = 6, I = 10, O = 12, r = tp.tp.rank, Ol = O / 2, per = O / fused / 2;
  auto col = [&](int64_t j) { return (j / per) * (O / fused) + r * per + j % per; };
  const ParallelContext single;
  ParamStore fs, ts;
  Linear lf(fs, single, "l", I, O, true, 0.02f, LinearParallel::Column, fused);
  Linear lt(ts, tp, "l", I, O, true, 0.02f, LinearParallel::Column, fused);
  fs.finalize();
  ts.finalize();
  randomize(fs, 1, 0.5f);
  copy_shards(fs, ts);
  EXPECT_EQ(lt.out_features(), Ol);
  const std::vector<float> x = random_vector(N * I, 2), dy = random_vector(N * O, 3), pre = random_vector(N * I, 4);
  Arena arena;
  // Single rank: dx = pre + dy W (accumulate).
  Tensor xf = Tensor::borrow(const_cast<float*>(x.data()), {N, I}, DType::F32);
  const std::vector<float> yf = copy_of(lf.forward(arena, xf));
  std::vector<float> dxf = pre;
  Tensor dxf_t = Tensor::borrow(dxf.data(), {N, I}, DType::F32);
  lf.backward(Tensor::borrow(const_cast<float*>(dy.data()), {N, O}, DType::F32), dxf_t, true);
  // Two ranks.
  std::vector<float> xl = local_rows_of(tp, x, N);
  const Tensor yt = lt.forward(arena, Tensor::borrow(xl.data(), {local_rows(tp, N), I}, DType::F32));
  ASSERT_EQ(yt.numel(), N * Ol);
  std::vector<float> dyl(N * Ol);
  double ey = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < Ol; ++j) {
      ey = std::max(ey, static_cast<double>(std::fabs(yt.data<float>()[n * Ol + j] - yf[n * O + col(j)])));
      dyl[n * Ol + j] = dy[n * O + col(j)];
    }
  std::vector<float> dxt = local_rows_of(tp, pre, N);
  Tensor dxt_t = Tensor::borrow(dxt.data(), {local_rows(tp, N), I}, DType::F32);
  lt.backward(Tensor::borrow(dyl.data(), {N, Ol}, DType::F32), dxt_t, true);
  std::string worst;
  const double eg = world_max(grad_error(fs, ts, &worst));
  const double edx = world_max(rows_error(tp, dxt.data(), dxf, N));
  EXPECT_LT(world_max(ey), kTol);
  EXPECT_LT(edx, kTol);
  EXPECT_LT(eg, kTol) << worst;
  // The shard description checkpoints use.
  const ParamInfo& w = ts.info(lt.weight_id());
  if (fused == 1) {
    EXPECT_EQ(w.split_dim, 0);
    EXPECT_EQ(w.full_shape, Shape({O, I}));
    EXPECT_EQ(w.shard_begin, r * Ol);
  } else {
    EXPECT_EQ(w.split_dim, 1);
    EXPECT_EQ(w.full_shape, Shape({fused, O / fused, I}));
    EXPECT_EQ(w.shard_begin, r * per);
  }
}

void check_row(const ParallelContext& tp) {
  const int64_t N = 6, I = 10, O = 8, r = tp.tp.rank, Il = I / 2;
  const ParallelContext single;
  ParamStore fs, ts;
  Linear lf(fs, single, "l", I, O, true, 0.02f, LinearParallel::Row);
  Linear lt(ts, tp, "l", I, O, true, 0.02f, LinearParallel::Row);
  fs.finalize();
  ts.finalize();
  randomize(fs, 5, 0.5f);
  copy_shards(fs, ts);
  const std::vector<float> x = random_vector(N * I, 6), dy = random_vector(N * O, 7), pre = random_vector(N * I, 8);
  Arena arena;
  const std::vector<float> yf = copy_of(lf.forward(arena, Tensor::borrow(const_cast<float*>(x.data()), {N, I}, DType::F32)));
  std::vector<float> dxf = pre;
  Tensor dxf_t = Tensor::borrow(dxf.data(), {N, I}, DType::F32);
  lf.backward(Tensor::borrow(const_cast<float*>(dy.data()), {N, O}, DType::F32), dxf_t, true);
  // The row-parallel input is split by columns (the output of a column-parallel layer).
  std::vector<float> xl(N * Il), dxt(N * Il);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < Il; ++i) {
      xl[n * Il + i] = x[n * I + r * Il + i];
      dxt[n * Il + i] = pre[n * I + r * Il + i];
    }
  const Tensor yt = lt.forward(arena, Tensor::borrow(xl.data(), {N, Il}, DType::F32));
  ASSERT_EQ(yt.numel(), local_rows(tp, N) * O);
  const double ey = world_max(rows_error(tp, yt.data<float>(), yf, N));
  std::vector<float> dyl = local_rows_of(tp, dy, N);
  Tensor dxt_t = Tensor::borrow(dxt.data(), {N, Il}, DType::F32);
  lt.backward(Tensor::borrow(dyl.data(), {local_rows(tp, N), O}, DType::F32), dxt_t, true);
  double edx = 0, scale = 0;
  for (float v : dxf) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < Il; ++i)
      edx = std::max(edx, static_cast<double>(std::fabs(dxt[n * Il + i] - dxf[n * I + r * Il + i])) / scale);
  std::string worst;
  const double eg = world_max(grad_error(fs, ts, &worst));
  EXPECT_LT(ey, kTol);
  EXPECT_LT(world_max(edx), kTol);
  EXPECT_LT(eg, kTol) << worst;
  const ParamInfo& w = ts.info(lt.weight_id());
  EXPECT_EQ(w.split_dim, 1);
  EXPECT_EQ(w.shard_begin, r * Il);
  EXPECT_EQ(ts.info(ts.find("l.bias")).split_dim, -1);  // replicated, added once
}

}  // namespace

TEST(TensorParallel, ColumnLinear) {
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    check_column(*tp, 1);
  }
}

TEST(TensorParallel, ColumnLinearStackedBlocksShardEachBlock) {
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    check_column(*tp, 2);
  }
}

TEST(TensorParallel, RowLinear) {
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    check_row(*tp);
  }
}

// ---- blocks on the residual stream [N, C]: only the rows are split (sequence parallel) ----------

namespace {

// Runs `make` in a single-rank and a tp store, copies the weights, and compares forward rows, dx rows
// and every gradient. fwd(module, arena, x) -> y; bwd(module, arena, dy, dx).
template <typename M, typename Make, typename Fwd, typename Bwd>
void check_block(const ParallelContext& tp, int64_t N, int64_t C, Make make, Fwd fwd, Bwd bwd, uint64_t seed) {
  const ParallelContext single;
  ParamStore fs, ts;
  M mf = make(fs, single);
  M mt = make(ts, tp);
  fs.finalize();
  ts.finalize();
  randomize(fs, seed, 0.3f);
  copy_shards(fs, ts);
  const std::vector<float> x = random_vector(N * C, seed + 1), dy = random_vector(N * C, seed + 2);
  Arena arena;
  std::vector<float> xc = x, dyc = dy, dxf(N * C, NAN);
  const std::vector<float> yf = copy_of(fwd(mf, arena, Tensor::borrow(xc.data(), {N, C}, DType::F32)));
  Tensor dxf_t = Tensor::borrow(dxf.data(), {N, C}, DType::F32);
  bwd(mf, arena, Tensor::borrow(dyc.data(), {N, C}, DType::F32), dxf_t);
  arena.reset();
  const int64_t n = local_rows(tp, N);
  std::vector<float> xl = local_rows_of(tp, x, N), dyl = local_rows_of(tp, dy, N), dxt(n * C, NAN);
  const Tensor yt = fwd(mt, arena, Tensor::borrow(xl.data(), {n, C}, DType::F32));
  ASSERT_EQ(yt.numel(), n * C);
  const double ey = world_max(rows_error(tp, yt.data<float>(), yf, N));
  Tensor dxt_t = Tensor::borrow(dxt.data(), {n, C}, DType::F32);
  bwd(mt, arena, Tensor::borrow(dyl.data(), {n, C}, DType::F32), dxt_t);
  const double edx = world_max(rows_error(tp, dxt.data(), dxf, N));
  std::string worst;
  const double eg = world_max(grad_error(fs, ts, &worst));
  EXPECT_LT(ey, kTol);
  EXPECT_LT(edx, kTol);
  EXPECT_LT(eg, kTol) << worst;
  if (tp.world_rank == 0)
    std::printf("    max rel. error: output %.2e, input grad %.2e, param grads %.2e (%s)\n", ey, edx, eg, worst.c_str());
}

TransformerConfig attention_config(bool llama) {
  TransformerConfig c;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = llama ? 2 : 4;
  c.kv_channels = 8;
  c.max_position_embeddings = 16;
  c.add_bias_linear = true;
  c.qk_layernorm = llama;
  c.normalization = llama ? NormKind::RMSNorm : NormKind::LayerNorm;
  c.position_embedding = llama ? PositionEmbedding::Rope : PositionEmbedding::LearnedAbsolute;
  c.attention_mask = llama ? MaskType::None : MaskType::Causal;
  return c;
}

}  // namespace

TEST(TensorParallel, AttentionHeadsAndKvGroupsSplit) {
  const int64_t B = 2, T = 5, N = B * T;
  std::vector<int32_t> pos(N);
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(i % T);
  const BatchInfo batch{B, T, pos.data(), nullptr};
  for (bool llama : {false, true})
    for (bool sp : {false, true}) {
      MEGADLM_REQUIRE_TP2(tp, sp);
      SCOPED_TRACE(std::string(llama ? "GQA + QK-norm + RoPE, bidirectional" : "MHA, causal") +
                   (sp ? ", sequence parallel" : ""));
      const TransformerConfig cfg = attention_config(llama);
      check_block<SelfAttention>(
          *tp, N, cfg.hidden_size,
          [&](ParamStore& s, const ParallelContext& c) {
            return SelfAttention(s, c, "attn", cfg,
                                 SelfAttentionSpec{cfg.attention_mask, cfg.attention_block_size, cfg.qk_layernorm}, 0.02f);
          },
          [&](SelfAttention& m, Arena& a, const Tensor& x) { return m.forward(a, x, batch); },
          [&](SelfAttention& m, Arena& a, const Tensor& dy, Tensor& dx) { m.backward(a, dy, dx); }, 10);
    }
}

TEST(TensorParallel, HeadsNotDivisibleNameBothFlags) {
  MEGADLM_REQUIRE_TP2(tp, false);
  TransformerConfig cfg = attention_config(true);
  cfg.num_attention_heads = 6;
  cfg.num_query_groups = 3;
  ParamStore s;
  try {
    SelfAttention(s, *tp, "attn", cfg, SelfAttentionSpec{cfg.attention_mask, cfg.attention_block_size, cfg.qk_layernorm},
                  0.02f);
    FAIL() << "6 heads / 3 groups over tp 2 were accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--num-attention-heads 6"), std::string::npos) << m;
    EXPECT_NE(m.find("--num-query-groups 3"), std::string::npos) << m;
    EXPECT_NE(m.find("--tensor-model-parallel-size 2"), std::string::npos) << m;
  }
}

TEST(TensorParallel, MlpGeluAndSwiGLU) {
  const int64_t N = 8;
  for (Activation act : {Activation::Gelu, Activation::SwiGLU})
    for (bool sp : {false, true}) {
      MEGADLM_REQUIRE_TP2(tp, sp);
      SCOPED_TRACE(std::string(act == Activation::Gelu ? "GELU" : "SwiGLU") + (sp ? ", sequence parallel" : ""));
      TransformerConfig cfg = attention_config(false);
      cfg.activation = act;
      check_block<MLP>(
          *tp, N, cfg.hidden_size,
          [&](ParamStore& s, const ParallelContext& c) { return MLP(s, c, "mlp", cfg, cfg.activation, 24, 0.02f); },
          [&](MLP& m, Arena& a, const Tensor& x) { return m.forward(a, x); },
          [&](MLP& m, Arena& a, const Tensor& dy, Tensor& dx) { m.backward(a, dy, dx); }, 20);
    }
}

TEST(TensorParallel, VocabParallelEmbedding) {
  const int64_t B = 2, T = 6, N = B * T;
  TransformerConfig cfg = attention_config(false);  // learned positions
  cfg.hidden_size = 8;
  cfg.vocab_size = 20;
  std::vector<int32_t> tokens(N), pos(N);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % cfg.vocab_size);  // ids in both halves, one repeated
    pos[i] = static_cast<int32_t>(i % T);
  }
  tokens[5] = tokens[1];
  const BatchInfo batch{B, T, pos.data(), nullptr};
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    const ParallelContext single;
    ParamStore fs, ts;
    const EmbeddingSpec spec{cfg.position_embedding == PositionEmbedding::LearnedAbsolute};
    Embedding ef(fs, single, cfg, spec), et(ts, *tp, cfg, spec);
    fs.finalize();
    ts.finalize();
    randomize(fs, 30, 1.0f);
    copy_shards(fs, ts);
    const ParamInfo& w = ts.info(et.word_embeddings_id());
    EXPECT_EQ(w.split_dim, 0);
    EXPECT_EQ(w.shard_begin, tp->tp.rank * 10);
    Arena arena;
    const std::vector<float> yf = copy_of(ef.forward(arena, tokens.data(), batch));
    const Tensor yt = et.forward(arena, tokens.data(), batch);
    ASSERT_EQ(yt.numel(), local_rows(*tp, N) * cfg.hidden_size);
    EXPECT_LT(world_max(rows_error(*tp, yt.data<float>(), yf, N)), kTol);
    std::vector<float> dx = random_vector(N * cfg.hidden_size, 31);
    ef.backward(Tensor::borrow(dx.data(), {N, cfg.hidden_size}, DType::F32));
    std::vector<float> dxl = local_rows_of(*tp, dx, N);
    et.backward(Tensor::borrow(dxl.data(), {local_rows(*tp, N), cfg.hidden_size}, DType::F32));
    std::string worst;
    EXPECT_LT(world_max(grad_error(fs, ts, &worst)), kTol) << worst;
  }
}

// The output layers' tests: C = 6, V = 2 x 613, and targets for N rows spread over the vocabulary,
// row 3 ignored, rows 4 and 5 on the last column of rank 0 and the first of rank 1.
namespace {
constexpr int64_t kHeadC = 6, kHeadV = 1226;
TransformerConfig head_config() {
  TransformerConfig cfg;
  cfg.hidden_size = kHeadC;
  cfg.vocab_size = kHeadV;
  return cfg;
}
std::vector<int32_t> head_targets(int64_t N) {
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n) targets[n] = static_cast<int32_t>((n * 389 + 11) % kHeadV);
  targets[3] = -100;
  targets[4] = 612;  // the last column of rank 0
  targets[5] = 613;  // the first column of rank 1
  return targets;
}

// A single-rank output layer (hf) and its tp shards (ht) with the same weights (seed, scale 3).
struct HeadPair {
  ParallelContext single;
  ParamStore fs, ts;
  LMHead hf, ht;
  HeadPair(const ParallelContext* tp, uint64_t seed) : hf(fs, head_config(), -1, &single), ht(ts, head_config(), -1, tp) {
    fs.finalize();
    ts.finalize();
    randomize(fs, seed, 3.0f);
    copy_shards(fs, ts);
  }
};

// The tp head's loss and per-token losses (row 3 ignored) against the single rank's.
void expect_same_losses(double loss_t, double loss_f, const std::vector<float>& lt, const std::vector<float>& lf) {
  EXPECT_LT(world_max(std::fabs(loss_t - loss_f) / std::fabs(loss_f)), 1e-6) << loss_t << " vs " << loss_f;
  double el = 0;
  for (size_t i = 0; i < lf.size(); ++i) el = std::max(el, static_cast<double>(std::fabs(lt[i] - lf[i])) / loss_f);
  EXPECT_LT(world_max(el), 1e-6);
  EXPECT_EQ(lt[3], 0.0f);
}
}  // namespace

// The output layer with the vocab-parallel cross-entropy: the logits [N, V/2] of each rank are never
// gathered, yet the loss, per-token losses, dx and the weight gradient match the single rank. A
// vocabulary of 2 x 613 columns spans several of the kernel's 512-term sum blocks; ignored targets
// and per-token weights as in the diffusion loss; large logits exercise the max subtraction.
TEST(TensorParallel, VocabParallelCrossEntropyInTheHead) {
  const int64_t N = 10, C = kHeadC, V = kHeadV;
  std::vector<int32_t> targets = head_targets(N);
  targets[7] = -100;
  const std::vector<float> weights = random_vector(N, 40, 0.1f, 2.0f);
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    HeadPair heads(tp, 41);
    LMHead &hf = heads.hf, &ht = heads.ht;
    const std::vector<float> x = random_vector(N * C, 42, -2.0f, 2.0f);
    Arena arena;
    std::vector<float> xf = x, dxf(N * C, NAN), lf(N, NAN), lt(N, NAN);
    Tensor dxf_t = Tensor::borrow(dxf.data(), {N, C}, DType::F32);
    const double loss_f = hf.loss_and_backward(arena, Tensor::borrow(xf.data(), {N, C}, DType::F32), targets.data(),
                                               weights.data(), 0.5f, dxf_t, lf.data());
    const int64_t n = local_rows(*tp, N);
    std::vector<float> xl = local_rows_of(*tp, x, N), dxt(n * C, NAN);
    Tensor dxt_t = Tensor::borrow(dxt.data(), {n, C}, DType::F32);
    const double loss_t = ht.loss_and_backward(arena, Tensor::borrow(xl.data(), {n, C}, DType::F32), targets.data(),
                                               weights.data(), 0.5f, dxt_t, lt.data());
    expect_same_losses(loss_t, loss_f, lt, lf);
    EXPECT_LT(world_max(rows_error(*tp, dxt.data(), dxf, N)), kTol);
    std::string worst;
    EXPECT_LT(world_max(grad_error(heads.fs, heads.ts, &worst)), kTol) << worst;
    // Forward only: the same loss.
    std::vector<float> xl2 = xl;
    EXPECT_NEAR(ht.loss(arena, Tensor::borrow(xl2.data(), {n, C}, DType::F32), targets.data(), weights.data(), nullptr),
                loss_t, 1e-9 * std::fabs(loss_t));
    // full_logits gathers the shards: [N, V] equal to the single rank's logits.
    const std::vector<float> full_ref = copy_of(hf.logits(arena, Tensor::borrow(xf.data(), {N, C}, DType::F32)));
    const Tensor full = ht.full_logits(arena, Tensor::borrow(xl2.data(), {n, C}, DType::F32));
    ASSERT_EQ(full.numel(), N * V);
    double ef = 0;
    for (int64_t i = 0; i < N * V; ++i) ef = std::max(ef, static_cast<double>(std::fabs(full.data<float>()[i] - full_ref[i])));
    EXPECT_LT(world_max(ef), 1e-4);
  }
}

// The same under --bf16 (bf16 products; on the CPU bf16 logits, and dlogits written over them): each
// rank's cross-entropy runs on its bf16 shard, the exponentials remade in the finish, and the result
// follows the single rank's bf16 head (loss, per-token losses, dx, the weight gradient), up to bf16
// rounding of the gradient where the shards' softmax denominators differ in the last bits; the
// forward-only loss equals the training loss.
TEST(TensorParallel, VocabParallelCrossEntropyInTheHeadBf16) {
  const int64_t N = 10, C = kHeadC;
  const std::vector<int32_t> targets = head_targets(N);
  const std::vector<float> weights = random_vector(N, 50, 0.1f, 2.0f);
  MEGADLM_REQUIRE_TP2(tp, false);
  HeadPair heads(tp, 51);
  LMHead &hf = heads.hf, &ht = heads.ht;
  PrecisionConfig pc;
  pc.mode = PrecisionMode::BF16;
  MixedPrecision pf(heads.fs, pc), pt(heads.ts, pc);
  hf.set_precision(&pf);
  ht.set_precision(&pt);
  const std::vector<float> x = random_vector(N * C, 52, -2.0f, 2.0f);
  Arena arena;
  std::vector<float> xf = x, dxf(N * C, NAN), dxt(N * C, NAN), lf(N, NAN), lt(N, NAN);
  Tensor dxf_t = Tensor::borrow(dxf.data(), {N, C}, DType::F32), dxt_t = Tensor::borrow(dxt.data(), {N, C}, DType::F32);
  const double loss_f = hf.loss_and_backward(arena, Tensor::borrow(xf.data(), {N, C}, DType::F32), targets.data(),
                                             weights.data(), 0.5f, dxf_t, lf.data());
  std::vector<float> xt = x;
  const double loss_t = ht.loss_and_backward(arena, Tensor::borrow(xt.data(), {N, C}, DType::F32), targets.data(),
                                             weights.data(), 0.5f, dxt_t, lt.data());
  expect_same_losses(loss_t, loss_f, lt, lf);
  EXPECT_LT(world_max(rows_error(*tp, dxt.data(), dxf, N)), 1e-2);
  std::string worst;
  EXPECT_LT(world_max(grad_error(heads.fs, heads.ts, &worst)), 1e-2) << worst;
  std::vector<float> xt2 = x;
  EXPECT_NEAR(ht.loss(arena, Tensor::borrow(xt2.data(), {N, C}, DType::F32), targets.data(), weights.data(), nullptr),
              loss_t, 1e-9 * std::fabs(loss_t));
}

