// Block diffusion sampling (infer/block_sampling.h) on tiny random block-causal models, and
// generate --sampler bd3 on a tiny checkpoint.
//
// The KV-cached sampler is checked against the uncached one (every step re-runs the committed
// blocks): the same tokens and the same per-step confidences bit for bit, greedy and seeded, for
// several prompts, block lengths, step counts and commit rules. Its semantics are checked against
// the plain forward of the model's block-causal mask: a greedy sampler written here on that forward
// gives the same tokens, and the cache left by the sampler, probed with a new block, gives the
// logits of the full forward of [committed blocks ; block].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "infer/block_sampling.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "models/language_model.h"
#include "model_util.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "train_fixture.h"

using namespace megadlm;

namespace {

constexpr int32_t kMask = 5;
constexpr int64_t kV = 23;
constexpr int64_t kVlim = 20;

TransformerConfig tiny(bool llama, MaskType mask, int64_t block) {
  TransformerConfig c = test::tiny_sampler_config(llama);
  c.attention_mask = mask;
  c.attention_block_size = block;
  return c;
}

std::unique_ptr<LanguageModel> model(bool llama, int64_t block, MaskType mask = MaskType::BlockCausal,
                                     uint64_t seed = 31) {
  const TransformerConfig c = tiny(llama, mask, block);
  auto m = std::make_unique<LanguageModel>(c, difflm_model_spec(c), ParallelContext::single());
  m->params().init(seed);
  return m;
}

BlockSampleOptions options(int64_t block, int64_t steps, int64_t max_new) {
  BlockSampleOptions o;
  o.block_length = block;
  o.steps = steps;
  o.max_new_tokens = max_new;
  o.mask_token = kMask;
  o.vocab_limit = kVlim;
  o.seed = 7;
  return o;
}

// A prompt of n tokens in [0, kVlim) without the mask token.
std::vector<int32_t> prompt(int64_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) {
    int32_t t = static_cast<int32_t>((i * 7 + salt * 3 + 1) % kVlim);
    if (t == kMask) t = 0;
    p.push_back(t);
  }
  return p;
}

struct SampleRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<DiffusionStepTrace> trace;
  DiffusionStats stats;
};

SampleRun run(LanguageModel& m, const std::vector<std::vector<int32_t>>& prompts, BlockSampleOptions o, bool kv_cache,
        KVCache* cache = nullptr) {
  SampleRun r;
  o.kv_cache = kv_cache;
  o.trace = &r.trace;
  o.stats = &r.stats;
  o.cache = cache;
  r.tokens = block_diffusion_generate(m, prompts, o);
  return r;
}

// The two runs took the same steps with bit-identical confidences (hence logits) and tokens.
void expect_same_run(const SampleRun& cached, const SampleRun& uncached, const std::string& what) {
  EXPECT_EQ(cached.tokens, uncached.tokens) << what;
  ASSERT_EQ(cached.trace.size(), uncached.trace.size()) << what;
  for (size_t i = 0; i < cached.trace.size(); ++i) {
    const DiffusionStepTrace &a = cached.trace[i], &b = uncached.trace[i];
    EXPECT_TRUE(a.seq == b.seq && a.block == b.block && a.step == b.step) << what << " trace " << i;
    EXPECT_EQ(a.committed_conf, b.committed_conf) << what << " trace " << i;
    EXPECT_EQ(a.skipped_conf, b.skipped_conf) << what << " trace " << i;
  }
  EXPECT_EQ(cached.stats.steps, uncached.stats.steps) << what;
}

std::string describe(bool llama, int64_t L, int64_t steps, int64_t P, const char* rule, float temp) {
  return std::string(llama ? "llama" : "gpt2") + " L=" + std::to_string(L) + " steps=" + std::to_string(steps) +
         " P=" + std::to_string(P) + " rule=" + rule + " T=" + std::to_string(temp);
}

}  // namespace

TEST(BlockSampler, CachedEqualsUncachedBitForBit) {
  struct Rule {
    const char* name;
    DiffusionSampler rule;
    Remasking remasking;
    float threshold;
  };
  const Rule rules[] = {{"mdlm", DiffusionSampler::MDLM, Remasking::LowConfidence, 0.0f},
                        {"llada", DiffusionSampler::LLaDA, Remasking::LowConfidence, 0.0f},
                        {"llada-random", DiffusionSampler::LLaDA, Remasking::Random, 0.0f},
                        {"llada-threshold", DiffusionSampler::LLaDA, Remasking::LowConfidence, 0.3f}};
  int checked = 0;
  for (bool llama : {false, true}) {
    for (int64_t L : {3, 4}) {
      auto m = model(llama, L);
      for (int64_t P : {0, 5}) {
        const std::vector<std::vector<int32_t>> prompts = {prompt(P, 1), prompt(P, 2), prompt(P, 3)};
        for (int64_t steps : {1, 3}) {
          for (const Rule& r : rules) {
            for (float temp : {0.0f, 0.9f}) {
              if (r.threshold > 0 && temp > 0) continue;
              BlockSampleOptions o = options(L, steps, 10);
              o.rule = r.rule;
              o.remasking = r.remasking;
              o.threshold = r.threshold;
              o.temperature = temp;
              const std::string what = describe(llama, L, steps, P, r.name, temp);
              const SampleRun cached = run(*m, prompts, o, true), uncached = run(*m, prompts, o, false);
              expect_same_run(cached, uncached, what);
              ASSERT_EQ(cached.tokens.size(), 3u);
              for (const auto& t : cached.tokens) {
                ASSERT_EQ(t.size(), 10u) << what;
                for (int32_t id : t) EXPECT_TRUE(id >= 0 && id < kVlim && id != kMask) << what;
              }
              // The cache runs each committed block once more, instead of every committed block at
              // every step.
              if (P + 10 > 2 * L) {
                EXPECT_LT(cached.stats.rows_computed, uncached.stats.rows_computed) << what;
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 2 * 2 * 2 * 7);
}

// Sequence b of a batch gets the tokens it gets alone with seed + b.
TEST(BlockSampler, BatchedSequencesAreTheSingleOnes) {
  auto m = model(true, 4);
  const std::vector<std::vector<int32_t>> prompts = {prompt(6, 1), prompt(6, 2), prompt(6, 3)};
  BlockSampleOptions o = options(4, 3, 10);
  o.temperature = 0.7f;
  const auto batch = block_diffusion_generate(*m, prompts, o);
  for (size_t b = 0; b < prompts.size(); ++b) {
    BlockSampleOptions one = o;
    one.seed = o.seed + b;
    EXPECT_EQ(block_diffusion_generate(*m, {prompts[b]}, one)[0], batch[b]) << "sequence " << b;
  }
}

namespace {

// A greedy LLaDA low-confidence sampler on the plain forward of the model's own (block-causal) mask:
// every step runs [committed blocks ; current block] from position 0.
std::vector<int32_t> greedy_on_full_forward(LanguageModel& m, const std::vector<int32_t>& p, int64_t L, int64_t steps,
                                            int64_t max_new) {
  const int64_t P = static_cast<int64_t>(p.size());
  const int64_t E = (P + max_new + L - 1) / L * L;
  std::vector<int32_t> x(p);
  x.resize(static_cast<size_t>(E), kMask);
  for (int64_t begin = P / L * L; begin < E; begin += L) {
    const int64_t end = begin + L;
    const std::vector<int64_t> k = tokens_per_step(end - std::max(begin, P), steps);
    for (int64_t s = 0; s < steps; ++s) {
      const std::vector<float> lg = test::sequence_logits(m, std::vector<int32_t>(x.begin(), x.begin() + end));
      std::vector<std::pair<float, int64_t>> cand;  // (confidence, position)
      std::vector<int32_t> best(static_cast<size_t>(E), -1);
      for (int64_t i = begin; i < end; ++i) {
        if (x[static_cast<size_t>(i)] != kMask) continue;
        const float* row = lg.data() + i * kV;
        float mx = -INFINITY;
        for (int64_t v = 0; v < kVlim; ++v)
          if (v != kMask && row[v] > mx) {
            mx = row[v];
            best[static_cast<size_t>(i)] = static_cast<int32_t>(v);
          }
        double z = 0;
        for (int64_t v = 0; v < kVlim; ++v)
          if (v != kMask) z += std::exp(static_cast<double>(row[v] - mx));
        cand.emplace_back(static_cast<float>(1.0 / z), i);
      }
      std::stable_sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (int64_t c = 0; c < std::min<int64_t>(k[static_cast<size_t>(s)], static_cast<int64_t>(cand.size())); ++c) {
        const int64_t i = cand[static_cast<size_t>(c)].second;
        x[static_cast<size_t>(i)] = best[static_cast<size_t>(i)];
      }
    }
  }
  return std::vector<int32_t>(x.begin() + P, x.begin() + P + max_new);
}

}  // namespace

TEST(BlockSampler, GreedyTokensAreThoseOfThePlainBlockCausalForward) {
  for (bool llama : {false, true}) {
    for (int64_t L : {3, 4}) {
      auto m = model(llama, L, MaskType::BlockCausal, 43);
      // An empty prompt under RoPE would tie: a block of masks alone has the same logits at every
      // position, and the order of the tied confidences would be float noise.
      for (int64_t P : {int64_t{llama ? 1 : 0}, int64_t{4}, int64_t{9}}) {
        for (int64_t steps : {int64_t{1}, L}) {
          BlockSampleOptions o = options(L, steps, 11);
          o.rule = DiffusionSampler::LLaDA;
          const std::vector<int32_t> p = prompt(P, 5);
          EXPECT_EQ(block_diffusion_generate(*m, {p}, o)[0], greedy_on_full_forward(*m, p, L, steps, 11))
              << describe(llama, L, steps, P, "llada", 0);
        }
      }
    }
  }
}

namespace {

void expect_close(const float* a, const float* b, int64_t n, double tol, const std::string& what) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << what << " element " << i;
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(static_cast<double>(b[i]))));
  }
  EXPECT_LT(worst, tol) << what;
}

// Logits [L, V] of `block` run at rows [row0, row0 + L) of sequence b against the cache.
std::vector<float> probe(LanguageModel& m, KVCache& cache, int64_t b, const std::vector<int32_t>& block, int64_t row0) {
  std::vector<int32_t> pos(block.size());
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(row0));
  MicroBatch mb;
  mb.B = 1;
  mb.T = static_cast<int64_t>(block.size());
  mb.tokens = block;
  mb.positions = pos;
  const Tensor lg = m.forward_logits_cached(mb, cache, b, &row0, /*causal=*/false, /*last_only=*/false);
  std::vector<float> out(lg.data<float>(), lg.data<float>() + lg.numel());
  m.arena().reset();
  return out;
}

// Rows [row0, row0 + n) of every sequence of `seqs` run together against the cache.
void run_rows(LanguageModel& m, KVCache& cache, const std::vector<std::vector<int32_t>>& seqs, int64_t row0,
              int64_t n) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  std::vector<int32_t> tokens, pos;
  for (const auto& s : seqs) {
    tokens.insert(tokens.end(), s.begin() + row0, s.begin() + row0 + n);
    for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(row0 + i));
  }
  const std::vector<int64_t> offsets(static_cast<size_t>(B), row0);
  MicroBatch mb;
  mb.B = B;
  mb.T = n;
  mb.tokens = tokens;
  mb.positions = pos;
  m.forward_logits_cached(mb, cache, 0, offsets.data(), /*causal=*/false, /*last_only=*/true);
  m.arena().reset();
}

// Rows [0, n) of sequence b of every layer's keys and values.
std::vector<float> cache_rows(KVCache& cache, int64_t b, int64_t n) {
  std::vector<float> out;
  for (size_t l = 0; l < cache.k.size(); ++l) {
    const float* k = cache.k_at(static_cast<int64_t>(l), b);
    const float* v = cache.v_at(static_cast<int64_t>(l), b);
    out.insert(out.end(), k, k + n * cache.KD);
    out.insert(out.end(), v, v + n * cache.KD);
  }
  return out;
}

}  // namespace

// After sampling, rows [0, L j) of the cache hold the clean keys/values of the j blocks before the
// last: bit for bit those of the committed tokens run block by block into an empty cache (no noisy
// keys/values of a denoising step left), and a new block run against them gets the logits of the
// full block-causal forward of [committed tokens ; new block].
TEST(BlockSampler, TheCacheHoldsTheCommittedBlocksCleanKeysAndValues) {
  for (bool llama : {false, true}) {
    const int64_t L = 4;
    auto m = model(llama, L);
    const std::vector<std::vector<int32_t>> prompts = {prompt(6, 1), prompt(6, 2)};
    BlockSampleOptions o = options(L, 2, 14);  // canvas of 20 = 5 blocks, the last one not committed
    o.temperature = 0.8f;
    KVCache cache;
    const SampleRun r = run(*m, prompts, o, true, &cache);
    const int64_t committed = 16;
    std::vector<std::vector<int32_t>> clean;
    for (int64_t b = 0; b < 2; ++b) {
      clean.push_back(prompts[b]);
      clean[b].insert(clean[b].end(), r.tokens[b].begin(), r.tokens[b].end());
      clean[b].resize(static_cast<size_t>(committed));
    }
    // The same rows from scratch, by the same calls (the batch's blocks together: the products' last
    // bits may depend on the number of rows of a call).
    KVCache fresh;
    m->allocate_cache(fresh, 2, 20);
    for (int64_t j = 0; j < committed / L; ++j) run_rows(*m, fresh, clean, j * L, L);
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_EQ(cache_rows(cache, b, committed), cache_rows(fresh, b, committed)) << "sequence " << b;
      // A new block against the cache, and the full forward.
      const std::vector<int32_t> block = {kMask, 3, kMask, 11};
      const std::vector<float> got = probe(*m, cache, b, block, committed);
      std::vector<int32_t> full(clean[b]);
      full.insert(full.end(), block.begin(), block.end());
      const std::vector<float> ref = test::sequence_logits(*m, full);
      expect_close(got.data(), ref.data() + committed * kV, L * kV, 1e-4,
                   std::string(llama ? "llama" : "gpt2") + " sequence " + std::to_string(b));
    }
  }
}

TEST(BlockSampler, StopsAfterTheBlockThatCommitsEodAndTrimsBeforeIt) {
  auto m = model(false, 4);
  const std::vector<std::vector<int32_t>> prompts = {prompt(5, 1), prompt(5, 2), prompt(5, 3)};
  BlockSampleOptions o = options(4, 4, 24);
  o.rule = DiffusionSampler::LLaDA;
  const SampleRun unstopped = run(*m, prompts, o, true);
  // An eod that sequence 0 commits (its 6th token, position 10, or an earlier one of that id).
  const int32_t eod = unstopped.tokens[0][5];
  o.eod = eod;
  for (bool kv : {true, false}) {
    const SampleRun stopped = run(*m, prompts, o, kv);
    for (size_t b = 0; b < prompts.size(); ++b) {
      const auto& f = unstopped.tokens[b];
      const std::vector<int32_t> expect(f.begin(), std::find(f.begin(), f.end(), eod));
      EXPECT_EQ(stopped.tokens[b], expect) << "sequence " << b << " kv " << kv;
    }
    int64_t last_block_of_0 = 0;
    for (const auto& t : stopped.trace)
      if (t.seq == 0) last_block_of_0 = std::max(last_block_of_0, t.block);
    const auto& u0 = unstopped.tokens[0];
    const int64_t eod_position = 5 + (std::find(u0.begin(), u0.end(), eod) - u0.begin());
    EXPECT_EQ(last_block_of_0, eod_position / 4) << "sequence 0 goes on after its eod block";
  }
  // Every sequence stopped early: fewer denoising calls than the full length needs.
  bool all_stop = true;
  for (const auto& f : unstopped.tokens) all_stop &= std::find(f.begin(), f.end(), eod) != f.end();
  if (all_stop) {
    EXPECT_LT(run(*m, prompts, o, true).stats.steps, unstopped.stats.steps);
  }
  // An eod in the prompt does not stop anything.
  std::vector<int32_t> with_eod = prompts[0];
  with_eod[1] = eod;
  o.eod = -1;
  const auto plain = block_diffusion_generate(*m, {with_eod}, o)[0];
  o.eod = eod;
  const auto again = block_diffusion_generate(*m, {with_eod}, o)[0];
  EXPECT_EQ(again, std::vector<int32_t>(plain.begin(), std::find(plain.begin(), plain.end(), eod)));
}

// The prompt's last partial block is the first block generated: its prompt tokens stay, only its
// other positions are denoised; the output is max_new_tokens long, cut at the last whole block
// within max_position_embeddings (48).
TEST(BlockSampler, PromptAndLengthHandling) {
  auto m = model(true, 4);
  for (int64_t P : {0, 3, 4, 6}) {
    BlockSampleOptions o = options(4, 4, 9);
    o.rule = DiffusionSampler::LLaDA;
    const SampleRun r = run(*m, {prompt(P, 2)}, o, true);
    ASSERT_EQ(r.tokens[0].size(), 9u) << "P " << P;
    ASSERT_FALSE(r.trace.empty());
    const DiffusionStepTrace& first = r.trace.front();
    EXPECT_EQ(first.block, P / 4) << "P " << P;
    EXPECT_EQ(static_cast<int64_t>(first.committed_conf.size() + first.skipped_conf.size()), 4 - P % 4) << "P " << P;
    // Blocks generated: those covering [P, P + 9).
    EXPECT_EQ(r.trace.back().block, (P + 9 - 1) / 4) << "P " << P;
  }
  BlockSampleOptions o = options(4, 1, 30);
  EXPECT_EQ(block_diffusion_generate(*m, {prompt(30, 1)}, o)[0].size(), 18u);  // 48 - 30
  o.max_new_tokens = std::numeric_limits<int64_t>::max();  // "as long as the positions allow"
  EXPECT_EQ(block_diffusion_generate(*m, {prompt(30, 1)}, o)[0].size(), 18u);
  o = options(5, 1, 30);
  auto m5 = model(false, 5);
  EXPECT_EQ(block_diffusion_generate(*m5, {prompt(30, 1)}, o)[0].size(), 15u);  // 45 - 30: blocks of 5 end at 45
  EXPECT_TRUE(block_diffusion_generate(*m5, {prompt(46, 1)}, o)[0].empty());    // no whole block fits
  o.max_new_tokens = 0;
  DiffusionStats stats;
  o.stats = &stats;
  EXPECT_TRUE(block_diffusion_generate(*m5, {prompt(3, 1)}, o)[0].empty());
  EXPECT_EQ(stats.rows_computed, 0);
}

TEST(BlockSampler, RejectsModelsAndOptionsItCannotRun) {
  const std::vector<std::vector<int32_t>> one = {prompt(3, 1)};
  auto causal = model(false, 0, MaskType::Causal);
  auto bidir = model(false, 0, MaskType::None);
  auto blocky = model(false, 4);
  auto err = [&](LanguageModel& m, const BlockSampleOptions& o) {
    return test::error_of([&] { block_diffusion_generate(m, one, o); });
  };
  auto expect_has = [](const std::string& msg, const std::vector<std::string>& parts) {
    ASSERT_FALSE(msg.empty());
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  };
  expect_has(err(*causal, options(4, 2, 8)), {"--sampler bd3", "block_causal", "attention mask causal"});
  expect_has(err(*bidir, options(4, 2, 8)), {"--sampler bd3", "attention mask no_mask"});
  expect_has(err(*blocky, options(8, 2, 8)), {"--block-length 8", "block size 4"});
  BlockSampleOptions o = options(4, 2, 8);
  o.threshold = 0.5f;  // with the default MDLM rule
  expect_has(err(*blocky, o), {"--threshold", "--commit-rule llada"});
  o = options(4, 0, 8);
  expect_has(err(*blocky, o), {"--steps"});
  expect_has(test::error_of([&] { block_diffusion_generate(*blocky, {prompt(3, 1), prompt(4, 1)}, options(4, 2, 8)); }),
             {"prompts of one length"});
  expect_has(test::error_of([&] { block_diffusion_generate(*blocky, {prompt(49, 1)}, options(4, 2, 8)); }),
             {"49 tokens", "--max-position-embeddings"});
}

// ---- generate --sampler bd3 ----------------------------------------------------------------------

namespace {

namespace fs = std::filesystem;

// Checkpoints of the tiny run (1 iteration): a block-causal difflm with block 4, a bidirectional
// difflm and a gpt.
class Bd3Generate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = (fs::temp_directory_path() / ("megadlm_bd3gen_" + std::to_string(::getpid()))).string();
    fs::remove_all(root_);
    fs::create_directories(root_);
    const std::string data = test::make_counting_dataset(root_, 40);
    const std::vector<std::string> flags = test::plus({"pretrain_difflm"}, test::tiny_difflm_flags(data));
    test::run_training(flags, {"--train-iters", "1", "--attention-mask-type", "block_causal", "--block-length", "4",
                               "--save", root_ + "/bd3"});
    test::run_training(flags, {"--train-iters", "1", "--save", root_ + "/plain"});
    test::run_training(flags, {"--train-iters", "1", "--block-diffusion", "--block-length", "4", "--save",
                               root_ + "/bd3trained"});
    std::vector<std::string> gpt_flags = flags;
    *(std::find(gpt_flags.begin(), gpt_flags.end(), "--model-type") + 1) = "gpt";
    test::run_training(gpt_flags, {"--train-iters", "1", "--save", root_ + "/gpt"});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static std::string bd3() { return root_ + "/bd3"; }
  static std::string plain() { return root_ + "/plain"; }
  static std::string gpt() { return root_ + "/gpt"; }
  static std::string bd3_trained() { return root_ + "/bd3trained"; }  // pretrain_difflm --block-diffusion
  static std::string root_;
};
std::string Bd3Generate::root_;

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

void expect_names(const test::ChildResult& r, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << "'" << p << "' not in: " << r.output;
}

}  // namespace

TEST_F(Bd3Generate, SamplesWithAndWithoutTheCacheAlike) {
  MEGADLM_REQUIRE_BINARY("generate");
  test::TempDir dir;
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"--temperature", "1", "--seed", "3", "--commit-rule", "llada", "--steps", "2"}}) {
    std::vector<std::vector<nlohmann::json>> outs;
    for (bool kv : {true, false}) {
      std::vector<std::string> args = {"--load", bd3(), "--sampler", "bd3", "--prompt", "1 2 3", "--prompt", "7 8 9",
                                       "--prompt", "4 5", "--max-new-tokens", "10", "--output", dir / "out.jsonl"};
      args.insert(args.end(), extra.begin(), extra.end());
      if (!kv) args.push_back("--no-kv-cache");
      const auto r = test::run_binary("generate", args, dir / "log.txt", {120, -1, ""});
      ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
      outs.push_back(read_jsonl(dir / "out.jsonl"));
      ASSERT_EQ(outs.back().size(), 3u);
      for (const auto& j : outs.back()) {
        EXPECT_LE(j["tokens"].get<int>(), 10);
        EXPECT_GT(j["denoising_steps"].get<int>(), 0);
      }
    }
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(outs[0][i]["generation"], outs[1][i]["generation"]) << "prompt " << i;
  }
}

// A checkpoint trained with --block-diffusion samples with bd3 when --sampler is not given.
TEST_F(Bd3Generate, BlockDiffusionCheckpointSamplesWithBd3ByDefault) {
  MEGADLM_REQUIRE_BINARY("generate");
  test::TempDir dir;
  std::vector<std::vector<nlohmann::json>> outs;
  for (const std::vector<std::string>& sampler : {std::vector<std::string>{}, {"--sampler", "bd3"}}) {
    std::vector<std::string> args = {"--load", bd3_trained(), "--prompt", "1 2 3", "--max-new-tokens", "10",
                                     "--temperature", "1", "--seed", "5", "--output", dir / "out.jsonl"};
    args.insert(args.end(), sampler.begin(), sampler.end());
    const auto r = test::run_binary("generate", args, dir / "log.txt", {120, -1, ""});
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
    outs.push_back(read_jsonl(dir / "out.jsonl"));
    ASSERT_EQ(outs.back().size(), 1u);
  }
  EXPECT_EQ(outs[0][0]["generation"], outs[1][0]["generation"]);
  EXPECT_EQ(outs[0][0]["denoising_steps"], outs[1][0]["denoising_steps"]);
  // The bd3 flags' checks apply to the default too.
  const auto r = test::run_binary("generate", {"--load", bd3_trained(), "--gen-length", "8"}, dir / "log.txt",
                                  {120, -1, ""});
  EXPECT_CLEAN_ERROR_EXIT(r);
  expect_names(r, {"--gen-length"});
}

TEST_F(Bd3Generate, BadFlagsExitOneNamingTheFlag) {
  MEGADLM_REQUIRE_BINARY("generate");
  test::TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> names;
  };
  const std::vector<Case> cases = {
      {{"--load", plain(), "--sampler", "bd3"}, {"--sampler bd3", plain(), "attention mask no_mask"}},
      {{"--load", bd3(), "--sampler", "bd3", "--block-length", "8"}, {"--block-length 8", "block size 4", bd3()}},
      {{"--load", bd3(), "--sampler", "bd3", "--gen-length", "8"}, {"--gen-length", "--sampler bd3"}},
      {{"--load", bd3(), "--sampler", "bd3", "--prefix-cache"}, {"--prefix-cache", "--sampler bd3"}},
      {{"--load", bd3(), "--sampler", "bd3", "--cfg-scale", "1"}, {"--cfg-scale", "--sampler bd3"}},
      {{"--load", bd3(), "--sampler", "bd3", "--commit-rule", "greedy"}, {"--commit-rule", "'greedy'"}},
      {{"--load", bd3(), "--commit-rule", "llada"}, {"--commit-rule", "--sampler bd3 only"}},
      {{"--load", gpt(), "--sampler", "bd3"}, {"--sampler bd3", gpt(), "autoregressive"}},
      {{"--load", bd3(), "--sampler", "bd3", "--threshold", "0.5"}, {"--threshold", "--commit-rule llada"}},
      {{"--load", bd3(), "--sampler", "bdd"}, {"--sampler", "'bdd'", "bd3"}},
  };
  for (const Case& c : cases) {
    const auto r = test::run_binary("generate", c.args, dir / "log.txt", {60, -1, ""});
    EXPECT_CLEAN_ERROR_EXIT(r);
    expect_names(r, c.names);
  }
}
