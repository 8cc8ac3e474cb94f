// Samplers: LLaDA-style diffusion generation and autoregressive generation on tiny random models.
//
// The greedy (temperature 0, low-confidence) diffusion sampler is compared step by step with a plain
// re-implementation here that runs the model itself and records every intermediate canvas, so the
// schedule (tokens per step, blocks, one token per step when steps == gen_length) is checked on the
// real function's output. The model is rigged so that the mask token and the ids past vocab_limit
// have by far the largest logits: a sampler that forgot to exclude them would output them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "infer/sampling.h"
#include "models/language_model.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "model_util.h"

using namespace megadlm;

namespace {

constexpr int32_t kMaskTok = 5;
constexpr int64_t kVocab = 23;
constexpr int64_t kVocabLimit = 20;  // ids 20, 21, 22 are padding of the vocabulary

TransformerConfig tiny(bool untie) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 32;
  c.vocab_size = kVocab;
  c.max_position_embeddings = 40;
  c.init_method_std = 0.4f;
  c.untie_embeddings_and_output_weights = untie;
  return c;
}

// A bidirectional diffusion model whose output favours the forbidden ids: the final LayerNorm gets a
// bias of 1 (so every hidden state has a large constant component) and the output rows of the mask
// token and of ids >= kVocabLimit point along it.
std::unique_ptr<LanguageModel> rigged_diffusion_model() {
  const TransformerConfig c = tiny(true);
  auto m = std::make_unique<LanguageModel>(c, decoder_model_spec(c, difflm_layer_spec(c, MaskType::None, 0)), ParallelContext::single());
  ParamStore& ps = m->params();
  ps.init(31);
  const int nb = ps.find("norm.bias"), nw = ps.find("norm.weight"), head = ps.find("lm_head.weight");
  EXPECT_GE(nb, 0);
  EXPECT_GE(nw, 0);
  EXPECT_GE(head, 0);
  ps.value(nb).fill_(1.0f);
  ps.value(nw).fill_(0.3f);
  float* w = ps.value(head).data<float>();
  for (int32_t v : {kMaskTok, int32_t{20}, int32_t{21}, int32_t{22}})
    for (int64_t k = 0; k < c.hidden_size; ++k) w[v * c.hidden_size + k] = 0.5f;
  return m;
}

std::unique_ptr<LanguageModel> gpt_model() {
  const TransformerConfig c = tiny(false);
  auto m = std::make_unique<LanguageModel>(c, gpt_model_spec(c), ParallelContext::single());
  m->params().init(17);
  return m;
}

std::vector<float> logits(LanguageModel& m, const std::vector<int32_t>& seq) { return test::sequence_logits(m, seq); }

// LLaDA's greedy low-confidence reverse process, written out plainly. Proposals and their softmax
// confidence are over ids [0, vlim) without the mask token. Returns the final canvas; `canvases`
// receives the canvas after every step.
std::vector<int32_t> reference_diffusion(LanguageModel& m, const std::vector<int32_t>& prompt, int64_t gen,
                                         int64_t steps, int64_t block, int64_t vlim,
                                         std::vector<std::vector<int32_t>>& canvases) {
  std::vector<int32_t> x = prompt;
  x.insert(x.end(), static_cast<size_t>(gen), kMaskTok);
  const int64_t P = static_cast<int64_t>(prompt.size()), blocks = gen / block, spb = steps / blocks;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t begin = P + blk * block, end = begin + block;
    for (int64_t s = 0; s < spb; ++s) {
      const int64_t k = block / spb + (s < block % spb ? 1 : 0);
      const std::vector<float> lg = logits(m, x);
      struct Cand {
        double conf;
        int64_t pos;
        int32_t tok;
      };
      std::vector<Cand> cands;
      for (int64_t i = begin; i < end; ++i) {
        if (x[static_cast<size_t>(i)] != kMaskTok) continue;
        const float* row = lg.data() + i * kVocab;
        int32_t best = -1;
        for (int32_t v = 0; v < vlim; ++v)
          if (v != kMaskTok && (best < 0 || row[v] > row[best])) best = v;
        double z = 0;
        for (int32_t v = 0; v < vlim; ++v)
          if (v != kMaskTok) z += std::exp(static_cast<double>(row[v]) - row[best]);
        cands.push_back({1.0 / z, i, best});
      }
      std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.conf > b.conf; });
      for (int64_t c = 0; c < std::min<int64_t>(k, static_cast<int64_t>(cands.size())); ++c)
        x[static_cast<size_t>(cands[static_cast<size_t>(c)].pos)] = cands[static_cast<size_t>(c)].tok;
      canvases.push_back(x);
    }
  }
  return x;
}

int64_t count_masks(const std::vector<int32_t>& x) { return std::count(x.begin(), x.end(), kMaskTok); }

DiffusionSampleOptions options(int64_t gen, int64_t steps, int64_t block) {
  DiffusionSampleOptions o;
  o.gen_length = gen;
  o.steps = steps;
  o.block_length = block;
  o.mask_token = kMaskTok;
  o.vocab_limit = kVocabLimit;
  o.seed = 3;
  return o;
}

void expect_valid(const std::vector<int32_t>& out, int64_t gen) {
  ASSERT_EQ(static_cast<int64_t>(out.size()), gen);
  for (int32_t t : out) {
    EXPECT_NE(t, kMaskTok);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, kVocabLimit);
  }
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one naming " << parts.front() << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace

TEST(Sampling, TokensPerStepSpreadsTheRemainderOverTheFirstSteps) {
  EXPECT_EQ(tokens_per_step(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(tokens_per_step(8, 8), (std::vector<int64_t>(8, 1)));
  EXPECT_EQ(tokens_per_step(3, 5), (std::vector<int64_t>{1, 1, 1, 0, 0}));
  EXPECT_EQ(tokens_per_step(12, 1), (std::vector<int64_t>{12}));
  for (int64_t masked : {1, 7, 32, 33}) {
    for (int64_t steps : {1, 2, 5, 32}) {
      const std::vector<int64_t> k = tokens_per_step(masked, steps);
      ASSERT_EQ(static_cast<int64_t>(k.size()), steps);
      EXPECT_EQ(std::accumulate(k.begin(), k.end(), int64_t{0}), masked);
      for (size_t i = 1; i < k.size(); ++i) EXPECT_LE(k[i], k[i - 1]);
      EXPECT_LE(k.front() - k.back(), 1);
    }
  }
}

TEST(Sampling, RiggedModelReallyPrefersTheForbiddenIds) {
  // Guards the next tests: without the exclusions, the argmax would be a forbidden id everywhere.
  auto m = rigged_diffusion_model();
  std::vector<int32_t> canvas = {3, 9, 14};
  canvas.insert(canvas.end(), 8, kMaskTok);
  const std::vector<float> lg = logits(*m, canvas);
  for (size_t i = 0; i < canvas.size(); ++i) {
    const float* row = lg.data() + i * kVocab;
    const int64_t a = std::max_element(row, row + kVocab) - row;
    EXPECT_TRUE(a == kMaskTok || a >= kVocabLimit) << "row " << i << " argmax " << a;
  }
}

TEST(Sampling, DiffusionGreedyMatchesTheReferenceScheduleStepByStep) {
  auto m = rigged_diffusion_model();
  const std::vector<int32_t> prompt = {3, 9, 14, 2};
  struct Case {
    int64_t gen, steps, block;
  };
  // one token per step; two per step; three blocks of two steps; remainder to the first steps (3,3,2,2).
  for (const Case c : {Case{8, 8, 8}, Case{8, 4, 8}, Case{12, 6, 4}, Case{10, 4, 10}, Case{8, 8, 2}}) {
    SCOPED_TRACE("gen " + std::to_string(c.gen) + " steps " + std::to_string(c.steps) + " block " +
                 std::to_string(c.block));
    const std::vector<int32_t> out = diffusion_generate(*m, prompt, options(c.gen, c.steps, c.block));
    expect_valid(out, c.gen);
    std::vector<std::vector<int32_t>> canvases;
    const std::vector<int32_t> ref = reference_diffusion(*m, prompt, c.gen, c.steps, c.block, kVocabLimit, canvases);
    EXPECT_EQ(out, std::vector<int32_t>(ref.begin() + static_cast<int64_t>(prompt.size()), ref.end()));
    // The reference's canvases spell out the schedule the real sampler must have followed to give the
    // same output: each step commits tokens_per_step of its block (one per step when steps ==
    // gen_length), the prompt never changes, and a committed token is never revised.
    ASSERT_EQ(static_cast<int64_t>(canvases.size()), c.steps);
    const int64_t spb = c.steps / (c.gen / c.block);
    const std::vector<int64_t> k = tokens_per_step(c.block, spb);
    std::vector<int32_t> prev = prompt;
    prev.insert(prev.end(), static_cast<size_t>(c.gen), kMaskTok);
    for (int64_t s = 0; s < c.steps; ++s) {
      const std::vector<int32_t>& cur = canvases[static_cast<size_t>(s)];
      EXPECT_EQ(count_masks(prev) - count_masks(cur), k[static_cast<size_t>(s % spb)]) << "step " << s;
      EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), cur.begin()));
      for (size_t i = 0; i < cur.size(); ++i) {
        if (prev[i] != kMaskTok) {
          EXPECT_EQ(cur[i], prev[i]) << "step " << s << " position " << i;
        }
      }
      prev = cur;
    }
    EXPECT_EQ(count_masks(prev), 0);
  }
}

TEST(Sampling, DiffusionIsDeterministicForASeedAndUsesIt) {
  auto m = rigged_diffusion_model();
  const std::vector<int32_t> prompt = {1, 2, 3};
  for (Remasking r : {Remasking::LowConfidence, Remasking::Random}) {
    DiffusionSampleOptions o = options(8, 4, 4);
    o.temperature = 1.0f;
    o.remasking = r;
    const std::vector<int32_t> a = diffusion_generate(*m, prompt, o);
    const std::vector<int32_t> b = diffusion_generate(*m, prompt, o);
    expect_valid(a, 8);
    EXPECT_EQ(a, b);
    bool differs = false;
    for (uint64_t seed = 10; seed < 14 && !differs; ++seed) {
      o.seed = seed;
      const std::vector<int32_t> c = diffusion_generate(*m, prompt, o);
      expect_valid(c, 8);
      differs = c != a;
    }
    EXPECT_TRUE(differs) << "temperature 1 gave the same text for 5 seeds";
  }
  // An empty prompt works too.
  expect_valid(diffusion_generate(*m, {}, options(6, 3, 6)), 6);
}

TEST(Sampling, DiffusionRejectsInconsistentOptions) {
  auto m = rigged_diffusion_model();
  const std::vector<int32_t> prompt = {1, 2};
  expect_error([&] { diffusion_generate(*m, prompt, options(10, 10, 4)); }, {"--gen-length 10", "--block-length 4"});
  expect_error([&] { diffusion_generate(*m, prompt, options(8, 3, 4)); }, {"--steps 3"});  // 2 blocks
  expect_error([&] { diffusion_generate(*m, prompt, options(8, 1, 4)); }, {"--steps 1"});  // fewer steps than blocks
  expect_error([&] { diffusion_generate(*m, prompt, options(8, 8, 0)); }, {"--block-length 0"});
  DiffusionSampleOptions no_mask = options(8, 8, 8);
  no_mask.mask_token = -1;
  expect_error([&] { diffusion_generate(*m, prompt, no_mask); }, {"mask token"});
  // Prompt + generation longer than the model's positions.
  expect_error([&] { diffusion_generate(*m, std::vector<int32_t>(36, 1), options(8, 8, 8)); },
               {"--max-position-embeddings"});
  expect_error([] { remasking_from_name("lowest"); }, {"--remasking", "lowest"});
  EXPECT_EQ(remasking_from_name("random"), Remasking::Random);
}

TEST(Sampling, ARGreedyIsTheArgmaxAtEachStepAndStopsAtEod) {
  auto m = gpt_model();
  const std::vector<int32_t> prompt = {4, 11, 7};
  // Reference: three greedy tokens, by hand, with and without a vocabulary limit.
  for (int64_t vlim : {int64_t{0}, int64_t{10}}) {
    std::vector<int32_t> seq = prompt, ref;
    for (int n = 0; n < 3; ++n) {
      const std::vector<float> lg = logits(*m, seq);
      const float* row = lg.data() + (seq.size() - 1) * kVocab;
      const int64_t lim = vlim > 0 ? vlim : kVocab;
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + lim) - row);
      ref.push_back(next);
      seq.push_back(next);
    }
    ARSampleOptions o;
    o.max_new_tokens = 3;
    o.vocab_limit = vlim;
    EXPECT_EQ(ar_generate(*m, prompt, o), ref) << "vocab_limit " << vlim;
    // Sampling restricted to the top token is greedy too.
    o.temperature = 0.8f;
    o.top_k = 1;
    EXPECT_EQ(ar_generate(*m, prompt, o), ref);
    o.top_k = 0;
    o.top_p = 1e-6f;
    EXPECT_EQ(ar_generate(*m, prompt, o), ref);
    // Stopping at eod: the output is the reference up to (not including) the first eod.
    for (int32_t eod : ref) {
      ARSampleOptions e;
      e.max_new_tokens = 3;
      e.vocab_limit = vlim;
      e.eod = eod;
      const std::vector<int32_t> expected(ref.begin(), std::find(ref.begin(), ref.end(), eod));
      EXPECT_EQ(ar_generate(*m, prompt, e), expected) << "eod " << eod;
    }
  }
  // Temperature sampling: deterministic for a seed, tokens inside the limit, length as asked.
  ARSampleOptions s;
  s.max_new_tokens = 6;
  s.temperature = 1.5f;
  s.top_k = 8;
  s.top_p = 0.9f;
  s.vocab_limit = 12;
  s.seed = 99;
  const std::vector<int32_t> a = ar_generate(*m, prompt, s), b = ar_generate(*m, prompt, s);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 6u);
  for (int32_t t : a) EXPECT_LT(t, 12);
  expect_error([&] { ar_generate(*m, {}, s); }, {"prompt"});
}
