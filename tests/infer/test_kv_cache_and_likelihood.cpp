// KV-cached inference, the extended diffusion samplers (CFG, threshold decoding, prefix cache, MDLM)
// and the likelihood estimators, on tiny random models.
//
// The cached paths are checked against the plain full forward (logits within float tolerance, greedy
// tokens identical); the sampler options by the per-step trace the sampler records; the diffusion
// ELBO estimator against the exact expectation computed here by enumerating every mask pattern of a
// short sequence; multiple-choice scoring on a model rigged so that one token is near certain.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "infer/likelihood.h"
#include "infer/sampling.h"
#include "models/language_model.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "model_util.h"

using namespace megadlm;

namespace {

constexpr int32_t kMask = 5;
constexpr int64_t kV = 23;

TransformerConfig tiny(bool llama) { return test::tiny_sampler_config(llama); }

std::unique_ptr<LanguageModel> gpt(bool llama, uint64_t seed = 17) {
  const TransformerConfig c = tiny(llama);
  auto m = std::make_unique<LanguageModel>(c, gpt_model_spec(c), ParallelContext::single());
  m->params().init(seed);
  return m;
}

std::unique_ptr<LanguageModel> dlm(bool llama, uint64_t seed = 31) {
  const TransformerConfig c = tiny(llama);
  auto m = std::make_unique<LanguageModel>(c, decoder_model_spec(c, difflm_layer_spec(c, MaskType::None, 0)), ParallelContext::single());
  m->params().init(seed);
  return m;
}

std::vector<float> full_logits(LanguageModel& m, const std::vector<int32_t>& seq) { return test::sequence_logits(m, seq); }

// Rows [from, from + n) of tokens written at cache rows starting at `offset`, logits copied out.
std::vector<float> cached_logits(LanguageModel& m, KVCache& cache, const std::vector<int32_t>& seq, int64_t from,
                                 int64_t offset, bool causal) {
  std::vector<int32_t> toks(seq.begin() + from, seq.end()), pos(toks.size());
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(offset));
  MicroBatch mb;
  mb.B = 1;
  mb.T = static_cast<int64_t>(toks.size());
  mb.tokens = toks;
  mb.positions = pos;
  const Tensor lg = m.forward_logits_cached(mb, cache, 0, &offset, causal, false);
  std::vector<float> out(lg.data<float>(), lg.data<float>() + lg.numel());
  m.arena().reset();
  return out;
}

void expect_close(const float* a, const float* b, int64_t n, double tol, const char* what) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << what << " element " << i;
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(static_cast<double>(b[i]))));
  }
  EXPECT_LT(worst, tol) << what;
}

}  // namespace

TEST(KVCache, IncrementalLogitsMatchTheFullForward) {
  for (bool llama : {false, true}) {
    auto m = gpt(llama);
    const std::vector<int32_t> seq = {3, 9, 1, 14, 0, 22, 7, 7, 12, 2, 19};
    const std::vector<float> ref = full_logits(*m, seq);
    KVCache cache;
    m->allocate_cache(cache, 1, 20);
    // Prefill of 4 rows, then one row at a time: every row's logits equal the full causal forward's.
    const std::vector<float> pre = cached_logits(*m, cache, std::vector<int32_t>(seq.begin(), seq.begin() + 4), 0, 0, true);
    expect_close(pre.data(), ref.data(), 4 * kV, 1e-4, llama ? "prefill (llama)" : "prefill (gpt2)");
    for (size_t t = 4; t < seq.size(); ++t) {
      const std::vector<float> one =
          cached_logits(*m, cache, std::vector<int32_t>(seq.begin(), seq.begin() + t + 1), static_cast<int64_t>(t),
                        static_cast<int64_t>(t), true);
      ASSERT_EQ(one.size(), static_cast<size_t>(kV));
      expect_close(one.data(), ref.data() + t * kV, kV, 1e-4, llama ? "decode (llama)" : "decode (gpt2)");
    }
  }
}

TEST(KVCache, GreedyARWithAndWithoutCacheGiveIdenticalTokensAlsoBatched) {
  for (bool llama : {false, true}) {
    auto m = gpt(llama);
    const std::vector<std::vector<int32_t>> prompts = {{4, 11, 7}, {1}, {20, 3, 3, 8, 15, 2, 9}};
    ARSampleOptions o;
    o.max_new_tokens = 14;
    std::vector<std::vector<int32_t>> single;
    for (const auto& p : prompts) {
      o.kv_cache = false;
      const std::vector<int32_t> a = ar_generate(*m, p, o);
      o.kv_cache = true;
      const std::vector<int32_t> b = ar_generate(*m, p, o);
      ASSERT_EQ(a.size(), 14u);
      EXPECT_EQ(a, b) << "llama " << llama;
      single.push_back(a);
    }
    // Batched decode of prompts of different lengths gives each prompt's own tokens.
    EXPECT_EQ(ar_generate_batch(*m, prompts, o), single);
    // Sampling with a seed: same tokens with and without the cache (sequence b uses seed + b).
    o.temperature = 1.3f;
    o.top_k = 9;
    o.top_p = 0.95f;
    o.seed = 5;
    const auto cached = ar_generate_batch(*m, prompts, o);
    o.kv_cache = false;
    EXPECT_EQ(ar_generate_batch(*m, prompts, o), cached);
    // Stopping at eod inside a batch: every sequence is cut at its first eod.
    ARSampleOptions e;
    e.max_new_tokens = 14;
    e.eod = single[0][3];
    const auto stopped = ar_generate_batch(*m, prompts, e);
    for (size_t b = 0; b < prompts.size(); ++b) {
      const std::vector<int32_t> expect(single[b].begin(), std::find(single[b].begin(), single[b].end(), e.eod));
      EXPECT_EQ(stopped[b], expect) << "sequence " << b;
    }
    // The positions limit: prompt 40 + 14 new > 48 positions stops at 48 tokens in all.
    const std::vector<int32_t> longp(40, 2);
    o = ARSampleOptions{};
    o.max_new_tokens = 14;
    const std::vector<int32_t> lc = ar_generate(*m, longp, o);
    o.kv_cache = false;
    EXPECT_EQ(ar_generate(*m, longp, o), lc);
    EXPECT_EQ(lc.size(), 8u);
  }
}

TEST(KVCache, PrefixCachedBlockRowsMatchTheFullBidirectionalForward) {
  // With unchanged tokens, rows [P, T) run against the cached rows [0, P) equal the full forward.
  for (bool llama : {false, true}) {
    auto m = dlm(llama);
    const std::vector<int32_t> seq = {3, 9, 1, 14, kMask, kMask, 7, kMask, 12, kMask};
    const std::vector<float> ref = full_logits(*m, seq);
    KVCache cache;
    m->allocate_cache(cache, 1, static_cast<int64_t>(seq.size()));
    const std::vector<float> all = cached_logits(*m, cache, seq, 0, 0, false);
    expect_close(all.data(), ref.data(), static_cast<int64_t>(ref.size()), 1e-4, "full pass through the cache");
    const std::vector<float> tail = cached_logits(*m, cache, seq, 4, 4, false);
    expect_close(tail.data(), ref.data() + 4 * kV, 6 * kV, 1e-4, "block rows against the cached prefix");
  }
}

namespace {

DiffusionSampleOptions dopt(int64_t gen, int64_t steps, int64_t block) {
  DiffusionSampleOptions o;
  o.gen_length = gen;
  o.steps = steps;
  o.block_length = block;
  o.mask_token = kMask;
  o.vocab_limit = 20;
  o.seed = 3;
  return o;
}

void expect_filled(const std::vector<int32_t>& g, int64_t n) {
  ASSERT_EQ(static_cast<int64_t>(g.size()), n);
  for (int32_t t : g) {
    EXPECT_NE(t, kMask);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 20);
  }
}

}  // namespace

TEST(DiffusionSampler, CommitsExactlyTheScheduledCountsAndIsDeterministic) {
  auto m = dlm(true);
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {8, 4, 0}};
  struct Case { int64_t gen, steps, block; float temp, cfg; Remasking r; };
  for (const Case c : {Case{12, 12, 4, 0.0f, 0.0f, Remasking::LowConfidence}, Case{12, 6, 6, 0.8f, 0.0f, Remasking::LowConfidence},
                       Case{10, 4, 5, 1.0f, 0.0f, Remasking::Random}, Case{8, 8, 8, 0.0f, 1.5f, Remasking::LowConfidence},
                       Case{9, 3, 3, 0.7f, 0.5f, Remasking::LowConfidence}}) {
    DiffusionSampleOptions o = dopt(c.gen, c.steps, c.block);
    o.temperature = c.temp;
    o.cfg_scale = c.cfg;
    o.remasking = c.r;
    std::vector<DiffusionStepTrace> trace;
    o.trace = &trace;
    const auto out = diffusion_generate_batch(*m, prompts, o);
    const int64_t blocks = c.gen / c.block, spb = c.steps / blocks;
    ASSERT_EQ(static_cast<int64_t>(trace.size()), 2 * c.steps);
    for (const DiffusionStepTrace& t : trace) {
      const std::vector<int64_t> k = tokens_per_step(c.block, spb);
      EXPECT_EQ(t.scheduled, k[static_cast<size_t>(t.step)]);
      EXPECT_EQ(static_cast<int64_t>(t.committed_conf.size()), t.scheduled) << "block " << t.block << " step " << t.step;
      // The committed ones are the most confident.
      for (float a : t.committed_conf)
        for (float s : t.skipped_conf) EXPECT_GE(a, s);
    }
    // Deterministic for a seed; the batch gives each prompt what it gives alone with seed + b.
    o.trace = nullptr;
    EXPECT_EQ(diffusion_generate_batch(*m, prompts, o), out);
    for (size_t b = 0; b < prompts.size(); ++b) {
      DiffusionSampleOptions ob = o;
      ob.seed = o.seed + b;
      EXPECT_EQ(diffusion_generate(*m, prompts[b], ob), out[b]);
      expect_filled(out[b], c.gen);
    }
  }
  // CFG changes the result (scale 3 vs none) on at least one of a few prompts.
  bool differs = false;
  for (int32_t p = 0; p < 6 && !differs; ++p) {
    DiffusionSampleOptions o = dopt(8, 8, 8);
    const auto plain = diffusion_generate(*m, {p, 1}, o);
    o.cfg_scale = 3.0f;
    differs = diffusion_generate(*m, {p, 1}, o) != plain;
  }
  EXPECT_TRUE(differs);
}

TEST(DiffusionSampler, ThresholdDecodingCommitsAtLeastOneAndAllAboveThreshold) {
  auto m = dlm(false);
  for (bool prefix : {false, true}) {
    for (float th : {0.05f, 0.12f, 0.3f, 0.9f}) {
      DiffusionSampleOptions o = dopt(16, 0, 8);
      o.threshold = th;
      o.prefix_cache = prefix;
      std::vector<DiffusionStepTrace> trace;
      DiffusionStats stats;
      o.trace = &trace;
      o.stats = &stats;
      const std::vector<int32_t> g = diffusion_generate(*m, {2, 9, 4}, o);
      expect_filled(g, 16);
      int64_t total = 0;
      for (const DiffusionStepTrace& t : trace) {
        ASSERT_GE(t.committed_conf.size(), 1u);
        total += static_cast<int64_t>(t.committed_conf.size());
        for (float s : t.skipped_conf) EXPECT_LE(s, th) << "a masked token above the threshold was left";
        if (t.committed_conf.size() > 1)
          for (float a : t.committed_conf) EXPECT_GT(a, th);
        else
          for (float s : t.skipped_conf) EXPECT_GE(t.committed_conf[0], s);  // the single best
      }
      EXPECT_EQ(total, 16);
      EXPECT_EQ(stats.steps, static_cast<int64_t>(trace.size()));
      if (th == 0.05f) {
        EXPECT_LT(stats.steps, 16) << "a low threshold should commit several tokens per step";
      }
    }
  }
}

TEST(DiffusionSampler, PrefixCacheIsExactOnTheFirstStepOfEachBlockAndComputesFewerRows) {
  // With one step per block, every model call is a block's first step (a full pass), so the prefix
  // cache changes nothing.
  auto m = dlm(true);
  DiffusionSampleOptions o = dopt(12, 3, 4);
  const auto exact = diffusion_generate(*m, {1, 2, 3}, o);
  o.prefix_cache = true;
  EXPECT_EQ(diffusion_generate(*m, {1, 2, 3}, o), exact);
  // With several steps per block the later steps run only the block and suffix rows.
  DiffusionStats full, cached;
  o = dopt(12, 12, 4);
  o.stats = &full;
  const auto a = diffusion_generate(*m, {1, 2, 3}, o);
  o.prefix_cache = true;
  o.stats = &cached;
  const auto b = diffusion_generate(*m, {1, 2, 3}, o);
  expect_filled(a, 12);
  expect_filled(b, 12);
  EXPECT_EQ(full.steps, cached.steps);
  EXPECT_EQ(full.rows_computed, 12 * 15);
  // block 0: 15 + 3 * 12, block 1: 15 + 3 * 8, block 2: 15 + 3 * 4
  EXPECT_EQ(cached.rows_computed, 3 * 15 + 3 * (12 + 8 + 4));
  EXPECT_EQ(b, diffusion_generate(*m, {1, 2, 3}, o));
}

TEST(DiffusionSampler, MdlmAncestralSamplingFillsEveryPositionAndIsSeeded) {
  auto m = dlm(false);
  DiffusionSampleOptions o = dopt(12, 6, 6);
  o.sampler = DiffusionSampler::MDLM;
  std::vector<DiffusionStepTrace> trace;
  o.trace = &trace;
  const auto a = diffusion_generate(*m, {4, 4}, o);
  expect_filled(a, 12);
  int64_t total = 0;
  for (const auto& t : trace) total += static_cast<int64_t>(t.committed_conf.size());
  EXPECT_EQ(total, 12);
  o.trace = nullptr;
  EXPECT_EQ(diffusion_generate(*m, {4, 4}, o), a);
  // One step per block reveals the whole block at once: the per-position argmax of the first pass.
  DiffusionSampleOptions one = dopt(6, 1, 6);
  one.sampler = DiffusionSampler::MDLM;
  DiffusionSampleOptions llada = dopt(6, 1, 6);
  EXPECT_EQ(diffusion_generate(*m, {4, 4}, one), diffusion_generate(*m, {4, 4}, llada));
  EXPECT_THROW(diffusion_sampler_from_name("ddpm"), Error);
  DiffusionSampleOptions bad = dopt(6, 6, 6);
  bad.sampler = DiffusionSampler::MDLM;
  bad.threshold = 0.5f;
  EXPECT_THROW(diffusion_generate(*m, {4}, bad), Error);
}

namespace {

// -log p(x_i | x with mask m) summed over i in m, for one mask pattern, with optional CFG.
double masked_loss(LanguageModel& m, const std::vector<int32_t>& x, int64_t begin, uint32_t pattern, float cfg) {
  std::vector<int32_t> y(x);
  const int64_t L = static_cast<int64_t>(x.size()) - begin;
  for (int64_t i = 0; i < L; ++i)
    if (pattern >> i & 1) y[static_cast<size_t>(begin + i)] = kMask;
  const std::vector<float> c = full_logits(m, y);
  std::vector<float> u;
  if (cfg > 0) {
    std::vector<int32_t> z(y);
    std::fill(z.begin(), z.begin() + begin, kMask);
    u = full_logits(m, z);
  }
  double loss = 0;
  for (int64_t i = 0; i < L; ++i) {
    if (!(pattern >> i & 1)) continue;
    const int64_t r = begin + i;
    std::vector<double> row(kV);
    for (int64_t v = 0; v < kV; ++v) {
      const double cv = c[static_cast<size_t>(r * kV + v)];
      row[static_cast<size_t>(v)] = cfg > 0 ? u[static_cast<size_t>(r * kV + v)] + (cfg + 1.0) * (cv - u[static_cast<size_t>(r * kV + v)]) : cv;
    }
    const double mx = *std::max_element(row.begin(), row.end());
    double z = 0;
    for (double v : row) z += std::exp(v - mx);
    loss -= row[static_cast<size_t>(x[static_cast<size_t>(r)])] - mx - std::log(z);
  }
  return loss;
}

}  // namespace

TEST(Likelihood, DiffusionMonteCarloElboConvergesToTheEnumeratedExpectation) {
  auto m = dlm(false);
  struct Case { std::vector<int32_t> x; int64_t begin; float cfg; };
  for (const Case& c : {Case{{3, 17, 8, 1, 12}, 0, 0.0f}, Case{{2, 9, 4, 11, 0, 7}, 2, 0.0f}, Case{{2, 9, 4, 11, 0, 7}, 2, 1.0f}}) {
    const int64_t L = static_cast<int64_t>(c.x.size()) - c.begin;
    // Exact: E = sum_k (1/k) * mean over the C(L, k) patterns of size k of the masked loss.
    std::vector<double> sum(static_cast<size_t>(L + 1), 0.0);
    std::vector<int64_t> cnt(static_cast<size_t>(L + 1), 0);
    for (uint32_t p = 1; p < (1u << L); ++p) {
      const int k = __builtin_popcount(p);
      sum[static_cast<size_t>(k)] += masked_loss(*m, c.x, c.begin, p, c.cfg);
      ++cnt[static_cast<size_t>(k)];
    }
    double exact = 0;
    for (int64_t k = 1; k <= L; ++k) exact += sum[static_cast<size_t>(k)] / static_cast<double>(cnt[static_cast<size_t>(k)]) / static_cast<double>(k);
    DiffusionLikelihoodOptions o;
    o.mask_token = kMask;
    o.cfg_scale = c.cfg;
    o.mc_samples = 3000;
    o.batch = 64;
    o.seed = 7;
    const MCEstimate e = diffusion_nll(*m, c.x, c.begin, o, 42);
    EXPECT_EQ(e.samples, 3000);
    EXPECT_GT(e.se, 0.0);
    EXPECT_LT(e.se, 0.02 * exact);
    EXPECT_LT(std::abs(e.mean - exact), 4.0 * e.se) << "MC " << e.mean << " exact " << exact << " se " << e.se;
    // A few samples already land near it, and more samples shrink the error bar.
    o.mc_samples = 100;
    const MCEstimate small = diffusion_nll(*m, c.x, c.begin, o, 42);
    EXPECT_GT(small.se, e.se);
    EXPECT_LT(std::abs(small.mean - exact), 5.0 * small.se);
  }
}

namespace {

// A model whose final norm outputs a constant vector (weight 0, bias 1) and whose output row of
// `favourite` points along it, so token `favourite` has probability ~1 at every position.
void rig(LanguageModel& m, int32_t favourite) {
  ParamStore& ps = m.params();
  const int nb = ps.find("norm.bias"), nw = ps.find("norm.weight"), head = ps.find("lm_head.weight");
  ASSERT_GE(nb, 0);
  ASSERT_GE(nw, 0);
  ASSERT_GE(head, 0);
  ps.value(nb).fill_(1.0f);
  ps.value(nw).fill_(0.0f);
  const int64_t C = m.config().hidden_size;
  float* w = ps.value(head).data<float>();
  for (int64_t v = 0; v < m.config().vocab_size; ++v)
    for (int64_t k = 0; k < C; ++k) w[v * C + k] = v == favourite ? 2.0f : 0.0f;
}

}  // namespace

TEST(Likelihood, MultipleChoicePicksTheCertainContinuationForARAndDiffusion) {
  std::vector<ChoiceItem> items = {
      {{1, 2}, {{7, 7}, {3, 4}, {7, 3}}, 0},
      {{4}, {{3}, {9, 9, 9}, {7}}, 2},
      {{11, 0, 2}, {{2, 7}, {7, 7, 7}}, 1},
  };
  DiffusionLikelihoodOptions o;
  o.mask_token = kMask;
  o.mc_samples = 8;
  for (bool diffusion : {false, true}) {
    auto m = diffusion ? dlm(false) : gpt(false);
    rig(*m, 7);
    for (float cfg : {0.0f, 2.0f}) {
      if (cfg > 0 && !diffusion) continue;
      o.cfg_scale = cfg;
      const ChoiceResults r = score_multiple_choice(*m, diffusion, items, o);
      EXPECT_DOUBLE_EQ(r.accuracy, 1.0) << "diffusion " << diffusion;
      EXPECT_DOUBLE_EQ(r.accuracy_norm, 1.0);
      EXPECT_EQ(r.predictions, (std::vector<int64_t>{0, 2, 1}));
      for (size_t q = 0; q < items.size(); ++q) {
        EXPECT_GT(r.scores[q][static_cast<size_t>(items[q].label)], -1e-3);  // log p ~ 0
        for (size_t c = 0; c < items[q].choices.size(); ++c)
          if (static_cast<int64_t>(c) != items[q].label) {
            EXPECT_LT(r.scores[q][c], -10.0);
          }
      }
    }
  }
  // A wrong label is counted wrong.
  auto m = gpt(false);
  rig(*m, 7);
  items[0].label = 1;
  EXPECT_NEAR(score_multiple_choice(*m, false, items, o).accuracy, 2.0 / 3.0, 1e-12);
  items[0].label = 5;
  EXPECT_THROW(score_multiple_choice(*m, false, items, o), Error);
}
