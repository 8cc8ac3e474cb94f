// T5's generation (models/t5_model.h's decoder cache, infer/t5_generation.h) on the tiny random
// T5ForConditionalGeneration fixtures (tests/checkpoint/fixtures/hf_t5: v1.0, ReLU, tied and scaled
// output; hf_t5_v11: gated GELU, untied lm_head). Their generate.safetensors
// (tools/reference/make_t5_generate_fixture.py) holds a padded batch of two encoder sequences (11 ids, the
// second padded after 6), transformers' greedy model.generate of up to 12 new tokens from decoder start 0
// with eos 1 (the v1.1 fixture's second sequence ends at eos), and the raw logits of every step (float64).
// Checked: the KV-cached decoder's logits at every step against the whole model re-run on the growing
// prefix and against transformers' (1e-5 relative); the greedy ids against transformers', with and
// without the cache; sampling reproducible from a seed, top-k 1 equal to greedy, bad options refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/hf_fixture_util.h"
#include "checkpoint/hf_t5.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "infer/t5_generation.h"
#include "models/t5_model.h"
#include "test_util.h"

using namespace megadlm;

namespace {

constexpr int32_t kPad = 0, kEos = 1, kDecoderStart = 0;
constexpr int64_t kMaxNew = 12;

std::vector<int32_t> ints(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

struct GenerateFixture {
  std::unique_ptr<T5Model> model;
  int64_t B = 0, S = 0, L = 0;                // L: transformers' sequences' length (start id included)
  std::vector<int32_t> encoder, mask;          // [B*S]
  std::vector<int32_t> sequences;              // [B*L] transformers' output, start id first
  std::vector<float> logits;                   // [(L-1)*B*V] transformers' step logits

  explicit GenerateFixture(const std::string& name) {
    const std::string dir = test::hf_fixture(name);
    const HfT5Checkpoint ck = read_hf_t5_checkpoint(dir);
    model = std::make_unique<T5Model>(ck.info.config, ck.info.options, ParallelContext::single());
    load_params_into(ck.params, model->params(), dir);
    SafetensorsFile f(dir + "/generate.safetensors");
    const Tensor ids = f.get("input_ids"), seq = f.get("sequences"), lg = f.get("logits");
    B = ids.size(0);
    S = ids.size(1);
    L = seq.size(1);
    encoder = ints(ids);
    mask = ints(f.get("attention_mask"));
    sequences = ints(seq);
    logits.assign(lg.data<float>(), lg.data<float>() + lg.numel());
    EXPECT_EQ(lg.numel(), (L - 1) * B * model->config().vocab_size);
  }
  // Prompt b without its padding.
  std::vector<int32_t> prompt(int64_t b) const {
    std::vector<int32_t> p;
    for (int64_t j = 0; j < S; ++j)
      if (mask[b * S + j]) p.push_back(encoder[b * S + j]);
    return p;
  }
  std::vector<std::vector<int32_t>> prompts() const { return {prompt(0), prompt(1)}; }
  // transformers' new ids of sequence b up to its eos (not included), as t5_generate_batch returns them.
  std::vector<int32_t> expected(int64_t b) const {
    std::vector<int32_t> e;
    for (int64_t n = 1; n < L && sequences[b * L + n] != kEos; ++n) e.push_back(sequences[b * L + n]);
    return e;
  }
};

T5GenerateOptions greedy_options(bool kv_cache) {
  T5GenerateOptions o;
  o.sampling.max_new_tokens = kMaxNew;
  o.sampling.eod = kEos;
  o.sampling.kv_cache = kv_cache;
  o.decoder_start = kDecoderStart;
  o.pad = kPad;
  return o;
}

const char* const kFixtures[] = {"hf_t5", "hf_t5_v11"};

}  // namespace

// Teacher-forced on transformers' sequences: at step n the cached decoder runs row n only, the reference
// re-runs the whole model on the prefix of n + 1 rows; both against transformers' float64 step logits.
TEST(T5Generation, CachedStepLogitsEqualTheFullRecomputeAndTransformers) {
  for (const char* name : kFixtures) {
    GenerateFixture fx(name);
    const int64_t B = fx.B, V = fx.model->config().vocab_size, steps = fx.L - 1;
    T5DecoderCache cache;
    fx.model->start_generation(fx.encoder, fx.mask, B, fx.S, steps, cache);
    double worst_full = 0, worst_hf = 0;
    for (int64_t n = 0; n < steps; ++n) {
      std::vector<int32_t> row(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) row[b] = fx.sequences[b * fx.L + n];
      const Tensor lg = fx.model->decode_step_logits(row, cache);
      const std::vector<float> cached(lg.data<float>(), lg.data<float>() + B * V);
      EXPECT_EQ(cache.length, n + 1);

      T5Batch full;
      full.B = B;
      full.S = fx.S;
      full.T = n + 1;
      full.encoder_tokens = fx.encoder;
      full.encoder_mask = fx.mask;
      for (int64_t b = 0; b < B; ++b)
        full.decoder_tokens.insert(full.decoder_tokens.end(), fx.sequences.begin() + b * fx.L,
                                   fx.sequences.begin() + b * fx.L + n + 1);
      const Tensor fl = fx.model->forward_logits(full);
      for (int64_t b = 0; b < B; ++b) {
        const float* want = fl.data<float>() + (b * (n + 1) + n) * V;
        const std::vector<double> ref(want, want + V);
        const std::vector<double> hf(fx.logits.begin() + (n * B + b) * V, fx.logits.begin() + (n * B + b + 1) * V);
        const double e_full = test::max_rel_error(cached.data() + b * V, ref.data(), V);
        const double e_hf = test::max_rel_error(cached.data() + b * V, hf.data(), V);
        EXPECT_LT(e_full, 1e-5) << name << " step " << n << " sequence " << b;
        EXPECT_LT(e_hf, 1e-5) << name << " step " << n << " sequence " << b;
        worst_full = std::max(worst_full, e_full);
        worst_hf = std::max(worst_hf, e_hf);
      }
    }
    std::printf("%s: %lld steps, cached vs full recompute %.2e, cached vs transformers %.2e (max relative)\n", name,
                static_cast<long long>(steps), worst_full, worst_hf);
  }
}

TEST(T5Generation, GreedyIdsEqualTransformers) {
  for (const char* name : kFixtures) {
    GenerateFixture fx(name);
    for (const bool kv : {true, false}) {
      const auto got = t5_generate_batch(*fx.model, fx.prompts(), greedy_options(kv));
      ASSERT_EQ(got.size(), 2u);
      for (int64_t b = 0; b < fx.B; ++b)
        EXPECT_EQ(got[b], fx.expected(b)) << name << (kv ? " cached" : " recomputed") << ", sequence " << b;
    }
  }
  // The v1.1 fixture's second sequence stops at its eos before the 12 tokens; the others run to 12.
  GenerateFixture v11("hf_t5_v11");
  EXPECT_LT(v11.expected(1).size(), static_cast<size_t>(kMaxNew));
  EXPECT_EQ(v11.expected(0).size(), static_cast<size_t>(kMaxNew));
}

TEST(T5Generation, SamplingIsSeededAndTopKOneIsGreedy) {
  GenerateFixture fx("hf_t5_v11");
  const auto prompts = fx.prompts();
  T5GenerateOptions o = greedy_options(true);
  o.sampling.temperature = 1.5f;
  o.sampling.top_p = 0.95f;
  o.sampling.seed = 11;
  const auto a = t5_generate_batch(*fx.model, prompts, o);
  EXPECT_EQ(t5_generate_batch(*fx.model, prompts, o), a);  // the same seed: the same ids
  o.sampling.kv_cache = false;
  EXPECT_EQ(t5_generate_batch(*fx.model, prompts, o), a);  // and the same without the cache
  o.sampling.kv_cache = true;
  o.sampling.seeds = {11, 12};  // seed + b, given explicitly
  EXPECT_EQ(t5_generate_batch(*fx.model, prompts, o), a);
  o.sampling.seeds.clear();
  o.sampling.seed = 12;
  EXPECT_NE(t5_generate_batch(*fx.model, prompts, o), a);
  const auto greedy = t5_generate_batch(*fx.model, prompts, greedy_options(true));
  EXPECT_NE(a, greedy);  // temperature 1.5 leaves the argmax somewhere in 2 x 12 draws
  o.sampling.top_k = 1;  // one candidate left: the argmax whatever the draw
  EXPECT_EQ(t5_generate_batch(*fx.model, prompts, o), greedy);
}

TEST(T5Generation, BadOptionsAreErrors) {
  GenerateFixture fx("hf_t5");
  T5GenerateOptions o = greedy_options(true);
  o.sampling.max_new_tokens = 0;
  test::expect_error_with([&] { t5_generate_batch(*fx.model, fx.prompts(), o); }, "--max-new-tokens: 0");
  test::expect_error_with([&] { t5_generate_batch(*fx.model, {{5, 6}, {}}, greedy_options(true)); },
                          "prompt 1 has no tokens");
  test::expect_error_with([&] { t5_generate_batch(*fx.model, {{5, 600}}, greedy_options(true)); },
                          "encoder token 600 at 1 is outside the vocabulary");
}
