// The vocabulary split over tensor-parallel ranks without dividing by tp (core/parameters.h:
// balanced_rows, the first V % tp ranks hold one row more) and the padded vocabulary rows kept out of
// the softmax (nn/lm_head.h: -inf logits). VocabLayout.* run in one process; TensorParallelVocab.* need
// mpirun -np 2 (ctest runs them with the other TensorParallel* tests as mpi_tp_np2) and compare a tp-2
// model whose shards differ by a row with the single-rank model on the same weights.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/parameters.h"
#include "infer/likelihood.h"
#include "infer/sampling.h"
#include "models/config_json.h"
#include "models/gpt_spec.h"
#include "models/language_model.h"
#include "test_tp_util.h"

using namespace megadlm;
using namespace megadlm::test;

namespace {

// A small model of V rows of which `real` are tokens (0: all), GPT-2 style (tied embeddings) or
// LLaMA style (untied output layer).
TransformerConfig vocab_config(bool llama, int64_t V, int64_t real, MaskType mask) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = llama ? 2 : 4;
  c.kv_channels = 8;
  c.ffn_hidden_size = 64;
  c.vocab_size = V;
  c.real_vocab_size = real;
  c.max_position_embeddings = 16;
  c.normalization = llama ? NormKind::RMSNorm : NormKind::LayerNorm;
  c.activation = llama ? Activation::SwiGLU : Activation::Gelu;
  c.add_bias_linear = !llama;
  c.position_embedding = llama ? PositionEmbedding::Rope : PositionEmbedding::LearnedAbsolute;
  c.untie_embeddings_and_output_weights = llama;
  c.attention_mask = mask;
  return c;
}

ModelSpec spec_of(const TransformerConfig& c) {
  LayerSpec s = gpt_layer_spec(c);
  s.self_attention.mask = c.attention_mask;
  return decoder_model_spec(c, s);
}

// B x T tokens and targets among the first `tokens` ids, some targets ignored, per-token weights.
MicroBatch token_batch(int64_t tokens, uint64_t seed, bool weighted) {
  const int64_t B = 2, T = 8, N = B * T;
  MicroBatch mb;
  mb.B = B;
  mb.T = T;
  mb.tokens.resize(N);
  mb.positions.resize(N);
  mb.targets.resize(N);
  const std::vector<float> r = random_vector(3 * N, seed, 0.0f, 1.0f);
  for (int64_t i = 0; i < N; ++i) {
    mb.tokens[i] = static_cast<int32_t>(r[i] * static_cast<float>(tokens)) % static_cast<int32_t>(tokens);
    mb.positions[i] = static_cast<int32_t>(i % T);
    mb.targets[i] = static_cast<int32_t>(r[N + i] * static_cast<float>(tokens)) % static_cast<int32_t>(tokens);
    if (r[2 * N + i] > 0.7f) mb.targets[i] = kIgnoreIndex;
  }
  if (weighted) {
    mb.weights.resize(N);
    for (int64_t i = 0; i < N; ++i) mb.weights[i] = 0.5f + r[2 * N + i];
  }
  return mb;
}

// The largest |a - b| over two [N, V] logits, where an -inf in b must be an -inf in a.
double logits_error(const Tensor& a, const std::vector<float>& b) {
  double e = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data<float>()[i], y = b[static_cast<size_t>(i)];
    if (std::isinf(y)) {
      if (x != y) return INFINITY;
      continue;
    }
    e = std::max(e, std::fabs(static_cast<double>(x) - y));
  }
  return e;
}

// A model of `tokens` rows and the same model padded to V rows, on the same weights; the padded rows'
// weights are large, so that they would matter if they took part in a softmax.
struct PaddedPair {
  std::unique_ptr<LanguageModel> plain, padded;
  PaddedPair(bool llama, MaskType mask, int64_t tokens, int64_t V) {
    const TransformerConfig cfg_tok = vocab_config(llama, tokens, 0, mask);
    const TransformerConfig cfg_pad = vocab_config(llama, V, tokens, mask);
    plain = std::make_unique<LanguageModel>(cfg_tok, spec_of(cfg_tok), ParallelContext::single());
    padded = std::make_unique<LanguageModel>(cfg_pad, spec_of(cfg_pad), ParallelContext::single());
    randomize(plain->params(), 21, 0.1f);
    randomize(padded->params(), 22, 2.0f);  // the padded rows keep these
    for (const ParamInfo& p : plain->params().infos()) {
      const ParamInfo& q = padded->params().info(padded->params().find(p.name));
      std::copy(plain->params().values() + p.offset, plain->params().values() + p.offset + p.shape.numel(),
                padded->params().values() + q.offset);  // the first `tokens` rows of a vocabulary table
    }
  }
};

}  // namespace

TEST(VocabLayout, BalancedRowsCoverTheVocabularyInOrder) {
  for (int64_t V : {int64_t{7}, int64_t{259}, int64_t{260}, int64_t{50304}}) {
    for (int tp : {1, 2, 3, 4, 7}) {
      SCOPED_TRACE("V " + std::to_string(V) + " over " + std::to_string(tp));
      int64_t next = 0;
      for (int r = 0; r < tp; ++r) {
        const RowRange rows = balanced_rows(V, tp, r);
        EXPECT_EQ(rows.begin, next);
        // The first V % tp ranks hold one row more than the rest.
        EXPECT_EQ(rows.size, V / tp + (r < V % tp ? 1 : 0));
        next += rows.size;
      }
      EXPECT_EQ(next, V);
    }
  }
  EXPECT_EQ(balanced_rows(259, 4, 3).begin, 195);
  EXPECT_EQ(balanced_rows(259, 4, 3).size, 64);
}

// Init is keyed by the full tensor's element index: every shard of a 259-row table at tp 2, 3 and 4
// holds exactly its rows of the single-process table.
TEST(VocabLayout, UnevenShardsInitialiseAsTheirRowsOfTheFullTable) {
  const int64_t V = 259, C = 8;
  ParamStore full;
  const int fid = full.add("embed_tokens.weight", {V, C}, Init::Normal, 0.02f);
  full.finalize();
  full.init(11);
  for (int tp : {2, 3, 4}) {
    for (int r = 0; r < tp; ++r) {
      ParamStore shard;
      const int id = shard.add_balanced_shard("embed_tokens.weight", {V, C}, 0, tp, r, Init::Normal, 0.02f);
      shard.finalize();
      shard.init(11);
      const RowRange rows = balanced_rows(V, tp, r);
      ASSERT_EQ(shard.info(id).shape[0], rows.size);
      ASSERT_EQ(shard.info(id).shard_begin, rows.begin);
      const float* got = shard.value(id).data<float>();
      const float* want = full.value(fid).data<float>() + rows.begin * C;
      for (int64_t i = 0; i < rows.size * C; ++i) ASSERT_EQ(got[i], want[i]) << "tp " << tp << " rank " << r << " element " << i;
    }
  }
}

// A vocabulary too small to give every rank a row is refused, naming the flag.
TEST(VocabLayout, EveryRankNeedsARow) {
  ParamStore s;
  const std::string e = error_of([&] { s.add_balanced_shard("embed_tokens.weight", {3, 4}, 0, 4, 3, Init::Normal); });
  EXPECT_NE(e.find("leaves no rows for tensor-parallel rank 3 of 4"), std::string::npos) << e;
}

// The checkpoint config records the tokenizer's size when rows are padded (a config without the field,
// or from HuggingFace, has none); a value outside [0, vocab_size] or of the wrong type is an error
// naming the field.
TEST(VocabLayout, ConfigRecordsTheRealVocabularySize) {
  const TransformerConfig padded = vocab_config(false, 72, 67, MaskType::Causal);
  const nlohmann::json j = config_to_json(padded);
  EXPECT_EQ(j["real_vocab_size"], 67);
  EXPECT_EQ(config_from_json(j, "ckpt").real_vocab_size, 67);
  EXPECT_FALSE(config_to_json(vocab_config(false, 67, 67, MaskType::Causal)).contains("real_vocab_size"));
  nlohmann::json bad = j;
  bad.erase("real_vocab_size");
  EXPECT_EQ(config_from_json(bad, "ckpt").real_vocab_size, 0);
  bad["real_vocab_size"] = 73;
  EXPECT_NE(error_of([&] { config_from_json(bad, "ckpt"); }).find("'real_vocab_size' 73 is outside [0, vocab_size 72]"),
            std::string::npos);
  bad["real_vocab_size"] = "67";
  EXPECT_NE(error_of([&] { config_from_json(bad, "ckpt"); }).find("'real_vocab_size' has the wrong type"),
            std::string::npos);
}

// A model of 67 tokens padded to 72 rows (the padded rows' weights large, so that they would matter)
// trains as the same model without the padding: its loss, per-token losses, gradients and logits are
// those of the 67-row model on the same weights, the padded rows get no gradient and their logits are
// -inf, so no softmax (training, evaluation, sampling) gives them probability.
TEST(VocabLayout, PaddedRowsStayOutOfTheSoftmax) {
  const int64_t tokens = 67, V = 72;
  for (bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama style" : "gpt-2 style");
    const MaskType mask = llama ? MaskType::None : MaskType::Causal;
    PaddedPair pair(llama, mask, tokens, V);
    LanguageModel& plain = *pair.plain;
    LanguageModel& padded = *pair.padded;
    const MicroBatch mb = token_batch(tokens, 23, llama);
    const int64_t N = mb.B * mb.T;
    std::vector<float> lt(N), lp(N);
    const double want = plain.forward_backward(mb, 0.25f, lt.data());
    const double got = padded.forward_backward(mb, 0.25f, lp.data());
    EXPECT_LT(std::fabs(got - want) / std::fabs(want), 1e-6) << got << " vs " << want;
    for (int64_t i = 0; i < N; ++i) EXPECT_NEAR(lp[i], lt[i], 1e-5 * std::fabs(want)) << "token " << i;
    for (const ParamInfo& p : plain.params().infos()) {
      const ParamInfo& q = padded.params().info(padded.params().find(p.name));
      const float* gp = padded.params().grads() + q.offset;
      const float* gt = plain.params().grads() + p.offset;
      double scale = 1e-3;
      for (int64_t i = 0; i < p.shape.numel(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(gt[i])));
      for (int64_t i = 0; i < p.shape.numel(); ++i) ASSERT_NEAR(gp[i], gt[i], 1e-5 * scale) << p.name << " element " << i;
      for (int64_t i = p.shape.numel(); i < q.shape.numel(); ++i) ASSERT_EQ(gp[i], 0.0f) << p.name << " padded element " << i;
    }
    EXPECT_LT(std::fabs(padded.forward_loss(mb) - want) / std::fabs(want), 1e-6);
    const Tensor lg_t = plain.forward_logits(mb);
    const std::vector<float> ref(lg_t.data<float>(), lg_t.data<float>() + lg_t.numel());
    plain.arena().reset();
    const Tensor lg_p = padded.forward_logits(mb);
    ASSERT_EQ(lg_p.numel(), N * V);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t v = 0; v < tokens; ++v)
        ASSERT_NEAR(lg_p.data<float>()[n * V + v], ref[n * tokens + v], 1e-5) << "row " << n << " token " << v;
      for (int64_t v = tokens; v < V; ++v) ASSERT_EQ(lg_p.data<float>()[n * V + v], -INFINITY) << "row " << n << " padded " << v;
    }
    padded.arena().reset();
  }
}

// tp = 2 on 97 rows (49 + 48), 91 of them tokens: the shards differ by a row and the second holds
// the padding. Loss, per-token losses, gradients, the forward-only loss and the logits gathered over
// the vocabulary (uneven shards, padded to the widest and trimmed) match the single rank.
TEST(TensorParallelVocab, UnevenShardsMatchOneRank) {
  for (bool sp : {false, true}) {
    for (bool llama : {false, true}) {
      MEGADLM_REQUIRE_TP2(tp, sp);
      SCOPED_TRACE(std::string(sp ? "sequence parallel, " : "") + (llama ? "llama style" : "gpt-2 style"));
      const TransformerConfig cfg = vocab_config(llama, 97, 91, llama ? MaskType::None : MaskType::Causal);
      LanguageModel single(cfg, spec_of(cfg), ParallelContext::single());
      LanguageModel model(cfg, spec_of(cfg), *tp);
      const ParamInfo& wte = model.params().info(model.params().find("embed_tokens.weight"));
      EXPECT_EQ(wte.shape[0], tp->tp.rank == 0 ? 49 : 48);
      randomize(single.params(), 31 + llama, 0.1f);
      copy_shards(single.params(), model.params());
      const MicroBatch mb = token_batch(91, 32 + llama, llama);
      const int64_t N = mb.B * mb.T;
      std::vector<float> lf(N), lt(N);
      const double loss_f = single.forward_backward(mb, 0.5f, lf.data());
      const double loss_t = model.forward_backward(mb, 0.5f, lt.data());
      EXPECT_LT(world_max(std::fabs(loss_t - loss_f) / std::fabs(loss_f)), 1e-6) << loss_t << " vs " << loss_f;
      double etok = 0;
      for (int64_t i = 0; i < N; ++i) etok = std::max(etok, std::fabs(static_cast<double>(lt[i]) - lf[i]) / std::fabs(loss_f));
      EXPECT_LT(world_max(etok), 1e-6);
      std::string worst;
      EXPECT_LT(world_max(grad_error(single.params(), model.params(), &worst)), 5e-5) << worst;
      EXPECT_LT(world_max(std::fabs(model.forward_loss(mb) - loss_f) / std::fabs(loss_f)), 1e-6);
      const Tensor lg_f = single.forward_logits(mb);
      const std::vector<float> ref(lg_f.data<float>(), lg_f.data<float>() + lg_f.numel());
      single.arena().reset();
      const Tensor lg_t = model.forward_logits(mb);
      ASSERT_EQ(lg_t.numel(), N * cfg.vocab_size);
      EXPECT_LT(world_max(logits_error(lg_t, ref)), 1e-5);
      model.arena().reset();
    }
  }
}

// Classifier-free guidance combines two logits of each row; the padded rows' -inf must stay -inf (not
// NaN), so the guided diffusion likelihood and the guided sampler of the padded model (all V rows
// offered: vocab_limit 0) are those of the unpadded one.
TEST(VocabLayout, GuidedDiffusionIgnoresThePaddedRows) {
  const int64_t tokens = 67, V = 72;
  const int32_t mask_token = 66;
  PaddedPair pair(false, MaskType::None, tokens, V);
  const std::vector<int32_t> seq = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 3};
  DiffusionLikelihoodOptions lo;
  lo.mask_token = mask_token;
  lo.mc_samples = 4;
  lo.cfg_scale = 1.5f;
  lo.seed = 3;
  const MCEstimate want = diffusion_nll(*pair.plain, seq, 4, lo, 0);
  const MCEstimate got = diffusion_nll(*pair.padded, seq, 4, lo, 0);
  ASSERT_TRUE(std::isfinite(got.mean)) << got.mean;
  EXPECT_NEAR(got.mean, want.mean, 1e-5 * std::fabs(want.mean));
  DiffusionSampleOptions so;
  so.gen_length = 4;
  so.steps = 4;
  so.block_length = 4;
  so.cfg_scale = 1.5f;
  so.mask_token = mask_token;
  so.seed = 5;
  const std::vector<int32_t> prompt = {3, 14, 15, 9};
  EXPECT_EQ(diffusion_generate(*pair.padded, prompt, so), diffusion_generate(*pair.plain, prompt, so));
}
