// The whole LanguageModel under tensor parallelism (mpirun -np 2, tp = 2) against the single-rank
// model on the same full weights and micro-batch: GPT-2 style (LayerNorm, GELU, learned positions,
// biases, tied embeddings) and LLaMA style (RMSNorm, SwiGLU, RoPE, GQA, QK-norm, untied), causal (AR)
// and bidirectional (DLM) masks, with and without sequence parallelism. The loss must agree within
// 1e-6 relative, the per-token losses, every gradient shard and the gathered logits closely.
#include <gtest/gtest.h>

#include <cmath>

#include "models/gpt_spec.h"
#include "models/language_model.h"
#include "test_tp_util.h"

using namespace megadlm;
using namespace megadlm::test;

namespace {

struct Case {
  bool llama;
  MaskType mask;
  bool sp;
};

TransformerConfig model_config(bool llama, MaskType mask) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_query_groups = llama ? 2 : 4;
  c.kv_channels = 16;
  c.ffn_hidden_size = llama ? 96 : 128;
  c.vocab_size = 96;
  c.max_position_embeddings = 16;
  c.normalization = llama ? NormKind::RMSNorm : NormKind::LayerNorm;
  c.activation = llama ? Activation::SwiGLU : Activation::Gelu;
  c.add_bias_linear = !llama;
  c.position_embedding = llama ? PositionEmbedding::Rope : PositionEmbedding::LearnedAbsolute;
  c.qk_layernorm = llama;
  c.untie_embeddings_and_output_weights = llama;
  c.attention_mask = mask;
  return c;
}

ModelSpec spec_of(const TransformerConfig& c) {
  LayerSpec s = gpt_layer_spec(c);
  s.self_attention.mask = c.attention_mask;
  return decoder_model_spec(c, s);
}

void run_case(const Case& k, const ParallelContext& tp) {
  const TransformerConfig cfg = model_config(k.llama, k.mask);
  const bool dlm = k.mask != MaskType::Causal;
  const int64_t B = 2, T = 8, N = B * T;
  std::vector<int32_t> tokens(N), pos(N), targets(N);
  std::vector<float> weights(N);
  const std::vector<float> r = random_vector(3 * N, 50 + k.llama);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>(r[i] * 0.5f * 96 + 48) % 96;
    pos[i] = static_cast<int32_t>(i % T);
    targets[i] = static_cast<int32_t>(r[N + i] * 0.5f * 96 + 48) % 96;
    if (r[2 * N + i] > 0.4f) targets[i] = -100;  // AR: padding; DLM: unmasked positions
    weights[i] = 1.0f + 0.5f * r[2 * N + i];      // DLM: 1/t-like per-token weights
  }
  MicroBatch mb;
  mb.B = B;
  mb.T = T;
  mb.tokens = tokens;
  mb.positions = pos;
  mb.targets = targets;
  if (dlm) mb.weights = weights;

  LanguageModel single(cfg, spec_of(cfg), ParallelContext::single());
  LanguageModel model(cfg, spec_of(cfg), tp);
  randomize(single.params(), 60, 0.1f);
  copy_shards(single.params(), model.params());
  std::vector<float> lf(N), lt(N);
  const float scale = 1.0f / static_cast<float>(N);
  const double loss_f = single.forward_backward(mb, scale, lf.data());
  const double loss_t = model.forward_backward(mb, scale, lt.data());
  const double eloss = world_max(std::fabs(loss_t - loss_f) / std::fabs(loss_f));
  double etok = 0;
  for (int64_t i = 0; i < N; ++i) etok = std::max(etok, std::fabs(static_cast<double>(lt[i]) - lf[i]) / std::fabs(loss_f));
  std::string worst;
  const double egrad = world_max(grad_error(single.params(), model.params(), &worst));
  // A second micro-batch accumulates into the same gradients (the reductions must not double count).
  single.forward_backward(mb, scale);
  model.forward_backward(mb, scale);
  std::string worst2;
  const double egrad2 = world_max(grad_error(single.params(), model.params(), &worst2));
  EXPECT_LT(eloss, 1e-6) << loss_t << " vs " << loss_f;
  EXPECT_LT(world_max(etok), 1e-6);
  // Gradients through two layers: fp32 sums in another order (k_proj's nearly cancel: errors near 5e-6).
  EXPECT_LT(egrad, 5e-5) << worst;
  EXPECT_LT(egrad2, 5e-5) << worst2;
  // Forward only and the logits gathered over the vocabulary (evaluation and generation tools).
  const double fl_t = model.forward_loss(mb);
  EXPECT_LT(world_max(std::fabs(fl_t - loss_f) / std::fabs(loss_f)), 1e-6);
  const Tensor lg_f = single.forward_logits(mb);
  const std::vector<float> ref(lg_f.data<float>(), lg_f.data<float>() + lg_f.numel());
  single.arena().reset();
  const Tensor lg_t = model.forward_logits(mb);
  ASSERT_EQ(lg_t.numel(), N * cfg.vocab_size);
  double elog = 0;
  for (int64_t i = 0; i < lg_t.numel(); ++i) elog = std::max(elog, std::fabs(static_cast<double>(lg_t.data<float>()[i]) - ref[i]));
  model.arena().reset();
  EXPECT_LT(world_max(elog), 1e-5);
  if (tp.world_rank == 0)
    std::printf("    loss %.9g vs %.9g: rel. error %.2e; token losses %.2e; grads %.2e (%s), after 2 micro-batches %.2e; "
                "logits abs %.2e\n",
                loss_t, loss_f, eloss, etok, egrad, worst.c_str(), egrad2, elog);
}

}  // namespace

TEST(TensorParallelModel, Gpt2StyleAutoregressive) {
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    run_case({false, MaskType::Causal, sp}, *tp);
  }
}

TEST(TensorParallelModel, Gpt2StyleDiffusion) {
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    run_case({false, MaskType::None, sp}, *tp);
  }
}

TEST(TensorParallelModel, LlamaStyleGqaAutoregressive) {
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    run_case({true, MaskType::Causal, sp}, *tp);
  }
}

TEST(TensorParallelModel, LlamaStyleGqaDiffusion) {
  for (bool sp : {false, true}) {
    MEGADLM_REQUIRE_TP2(tp, sp);
    SCOPED_TRACE(sp ? "sequence parallel" : "tp");
    run_case({true, MaskType::None, sp}, *tp);
  }
}

// Sequence parallelism needs the micro-batch's tokens to divide over the tp ranks.
TEST(TensorParallelModel, SequenceParallelRowsMustDivide) {
  MEGADLM_REQUIRE_TP2(tp, true);
  EXPECT_THROW(local_rows(*tp, 7), Error);
  EXPECT_EQ(local_rows(*tp, 8), 4);
}

// Inference with a KV cache under tp: each rank caches only its KV groups; a prefill followed by one
// decoded row gives the single rank's logits (gathered over the vocabulary).
TEST(TensorParallelModel, KvCachedInferenceMatchesOneRank) {
  MEGADLM_REQUIRE_TP2(tp, false);
  const TransformerConfig cfg = model_config(true, MaskType::Causal);
  LanguageModel single(cfg, spec_of(cfg), ParallelContext::single());
  LanguageModel model(cfg, spec_of(cfg), *tp);
  randomize(single.params(), 70, 0.1f);
  copy_shards(single.params(), model.params());
  const int64_t B = 2, T = 5, S = 8;
  std::vector<int32_t> tokens(B * T), pos(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int32_t>((i * 37 + 5) % cfg.vocab_size);
    pos[i] = static_cast<int32_t>(i % T);
  }
  KVCache cf, ct;
  single.allocate_cache(cf, B, S);
  model.allocate_cache(ct, B, S);
  EXPECT_EQ(ct.KD * 2, cf.KD);  // this rank's half of the KV groups
  const int64_t offsets0[2] = {0, 0}, offsets1[2] = {T, T};
  double err = 0;
  for (int step = 0; step < 2; ++step) {
    MicroBatch mb;
    mb.B = B;
    mb.T = step == 0 ? T : 1;
    std::vector<int32_t> tk = tokens, ps = pos;
    if (step == 1) {
      tk = {7, 11};
      ps = {static_cast<int32_t>(T), static_cast<int32_t>(T)};
    }
    mb.tokens = tk;
    mb.positions = ps;
    const int64_t* off = step == 0 ? offsets0 : offsets1;
    const Tensor lf = single.forward_logits_cached(mb, cf, 0, off, true, false);
    const std::vector<float> ref(lf.data<float>(), lf.data<float>() + lf.numel());
    const Tensor lt = model.forward_logits_cached(mb, ct, 0, off, true, false);
    ASSERT_EQ(lt.numel(), static_cast<int64_t>(ref.size()));
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs(static_cast<double>(lt.data<float>()[i]) - ref[i]));
    single.arena().reset();
    model.arena().reset();
  }
  EXPECT_LT(world_max(err), 1e-5);
}
