// The block diffusion objective (objectives/block_diffusion.h): the [x_t ; x_0] layout it builds, its
// per-block noise levels and weights, the statistics of its mask draws, and that the draws depend on
// the global sample index only (micro-batch split, resumes).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "objectives/block_diffusion.h"
#include "test_util.h"

using namespace megadlm;

namespace {

constexpr int32_t kMask = 99;

BlockDiffusionOptions options(int64_t L, double lo = 1e-3, double hi = 1.0) {
  BlockDiffusionOptions o;
  o.seed = 77;
  o.mask_token = kMask;
  o.block_length = L;
  o.clip_min = lo;
  o.clip_max = hi;
  return o;
}

// B samples of T+1 ids (never the mask token), starting at global sample `first`.
SampleBatch samples(int64_t B, int64_t T, uint64_t first) {
  SampleBatch s;
  s.B = B;
  s.T = T;
  s.first_sample = first;
  s.tokens.resize(static_cast<size_t>(B * (T + 1)));
  for (size_t i = 0; i < s.tokens.size(); ++i) s.tokens[i] = static_cast<int32_t>((i * 7 + first) % 50);
  return s;
}

}  // namespace

// Row b of the micro-batch is [x_t ; x_0]: the clean half the sample itself with no loss, positions
// 0..T-1 twice, targets only at the masked positions of the noised half, each weighted 1 / (t_b B T).
TEST(BlockDiffusion, BuildsTheTwoHalvesLayout) {
  const int64_t B = 3, T = 16, L = 4;
  const BlockDiffusionOptions opt = options(L);
  const BlockDiffusion obj(opt);
  const SampleBatch in = samples(B, T, 40);
  MicroBatch mb;
  const ObjectiveStats st = obj.prepare(in, 0.5f, mb);
  ASSERT_EQ(mb.B, B);
  ASSERT_EQ(mb.T, 2 * T);
  EXPECT_EQ(mb.block_diffusion, L);
  EXPECT_TRUE(mb.segment_ids.empty());
  EXPECT_EQ(mb.weight, 0.5f);
  int64_t masked = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* x0 = in.tokens.data() + b * (T + 1);
    const uint64_t sample = in.first_sample + static_cast<uint64_t>(b);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t n = b * 2 * T + i, c = n + T;  // noised and clean row of position i
      EXPECT_EQ(mb.positions[n], i);
      EXPECT_EQ(mb.positions[c], i);
      EXPECT_EQ(mb.tokens[c], x0[i]) << "the clean half is x_0";
      EXPECT_EQ(mb.targets[c], kIgnoreIndex) << "no target in the clean half";
      EXPECT_EQ(mb.weights[c], 0.0f);
      const double t = block_diffusion_time(opt, sample, i / L);
      if (mb.tokens[n] == kMask) {
        ++masked;
        EXPECT_EQ(mb.targets[n], x0[i]);
        EXPECT_FLOAT_EQ(mb.weights[n], static_cast<float>(0.5 / t / static_cast<double>(B * T)));
      } else {
        EXPECT_EQ(mb.tokens[n], x0[i]);
        EXPECT_EQ(mb.targets[n], kIgnoreIndex);
        EXPECT_EQ(mb.weights[n], 0.0f);
      }
    }
  }
  EXPECT_EQ(st.loss_tokens, static_cast<double>(masked));
  EXPECT_EQ(st.real_tokens, static_cast<double>(B * T));
  EXPECT_EQ(st.sequences, static_cast<double>(B));
}

// Each block has its own level: the levels of one sample's blocks differ, lie in the clipped range,
// and average to its middle over many draws.
TEST(BlockDiffusion, NoiseLevelsArePerBlockWithinTheClippedRange) {
  const BlockDiffusionOptions opt = options(8, 0.3, 0.8);
  double sum = 0;
  int64_t n = 0;
  for (uint64_t s = 0; s < 500; ++s) {
    std::set<double> levels;
    for (int64_t k = 0; k < 8; ++k) {
      const double t = block_diffusion_time(opt, s, k);
      ASSERT_GE(t, 0.3);
      ASSERT_LE(t, 0.8);
      levels.insert(t);
      sum += t;
      ++n;
    }
    EXPECT_EQ(levels.size(), 8u) << "sample " << s;
  }
  EXPECT_NEAR(sum / static_cast<double>(n), 0.55, 0.01);
}

// Over many samples the masked fraction of a block is its level: per bin of t, the mean masked
// fraction is the mean t of the bin (4096 samples x 8 blocks x 8 tokens; the binomial noise of a bin
// is below 0.005).
TEST(BlockDiffusion, MaskRateOfEachBlockIsItsNoiseLevel) {
  const int64_t B = 64, T = 64, L = 8, nb = T / L;
  const BlockDiffusionOptions opt = options(L);
  const BlockDiffusion obj(opt);
  double masked[4] = {0, 0, 0, 0}, expected[4] = {0, 0, 0, 0};
  MicroBatch mb;
  for (uint64_t first = 0; first < 4096; first += B) {
    obj.prepare(samples(B, T, first), 1.0f, mb);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < nb; ++k) {
        const double t = block_diffusion_time(opt, first + static_cast<uint64_t>(b), k);
        const int bin = std::min(3, static_cast<int>(t * 4));
        for (int64_t i = k * L; i < (k + 1) * L; ++i) masked[bin] += mb.tokens[b * 2 * T + i] == kMask;
        expected[bin] += t * static_cast<double>(L);
      }
  }
  for (int bin = 0; bin < 4; ++bin) {
    ASSERT_GT(expected[bin], 1000);
    EXPECT_NEAR(masked[bin] / expected[bin], 1.0, 0.03) << "t bin " << bin;
  }
}

// The draws are keyed by the global sample index: one micro-batch of 4 equals two of 2, and a
// different seed draws differently.
TEST(BlockDiffusion, DrawsDependOnTheSampleIndexOnly) {
  const int64_t T = 32, L = 4;
  const BlockDiffusion obj(options(L));
  MicroBatch whole, first, second;
  obj.prepare(samples(4, T, 100), 1.0f, whole);
  SampleBatch all = samples(4, T, 100), a = all, b = all;
  a.B = b.B = 2;
  a.tokens.assign(all.tokens.begin(), all.tokens.begin() + 2 * (T + 1));
  b.tokens.assign(all.tokens.begin() + 2 * (T + 1), all.tokens.end());
  b.first_sample = 102;
  obj.prepare(a, 1.0f, first);
  obj.prepare(b, 1.0f, second);
  for (int64_t i = 0; i < 2 * 2 * T; ++i) {
    EXPECT_EQ(whole.tokens[i], first.tokens[i]);
    EXPECT_EQ(whole.tokens[4 * T + i], second.tokens[i]);
    EXPECT_EQ(whole.weights[i] * 2, first.weights[i]) << "each micro-batch is normalised by its own B T";
  }
  BlockDiffusionOptions other = options(L);
  other.seed = 78;
  MicroBatch reseeded;
  BlockDiffusion(other).prepare(samples(4, T, 100), 1.0f, reseeded);
  EXPECT_NE(reseeded.tokens, whole.tokens);
}

// Evaluation draws from a seed of its own over the unclipped [eps, 1].
TEST(BlockDiffusion, EvaluationUsesTheUnclippedRange) {
  BlockDiffusionOptions opt = options(4, 0.3, 0.8);
  opt.eps = 0.01;
  const auto eval = BlockDiffusion(opt).for_evaluation();
  MicroBatch train_mb, eval_mb;
  BlockDiffusion(opt).prepare(samples(8, 64, 0), 1.0f, train_mb);
  eval->prepare(samples(8, 64, 0), 1.0f, eval_mb);
  EXPECT_NE(train_mb.tokens, eval_mb.tokens);
  // Weights are 1 / (t B T): under [0.3, 0.8] t never reaches below 0.3, over [0.01, 1] some block does.
  float max_train = 0, max_eval = 0;
  for (float w : train_mb.weights) max_train = std::max(max_train, w * 8 * 64);
  for (float w : eval_mb.weights) max_eval = std::max(max_eval, w * 8 * 64);
  EXPECT_LE(max_train, 1.0f / 0.3f + 1e-4f);
  EXPECT_GT(max_eval, 1.0f / 0.3f);
  EXPECT_NE(eval->describe().find("U[0.01, 1]"), std::string::npos) << eval->describe();
}

TEST(BlockDiffusion, RefusesBadSizesAndOptions) {
  const BlockDiffusion obj(options(5));
  MicroBatch mb;
  const std::string e = test::error_of([&] { obj.prepare(samples(2, 32, 0), 1.0f, mb); });
  EXPECT_NE(e.find("--seq-length 32 is not a multiple of --block-length 5"), std::string::npos) << e;
  BlockDiffusionOptions no_mask = options(4);
  no_mask.mask_token = -1;
  EXPECT_NE(test::error_of([&] { BlockDiffusion{no_mask}; }).find("mask token"), std::string::npos);
  const std::string clip = test::error_of([&] { BlockDiffusion{options(4, 0.9, 0.2)}; });
  EXPECT_NE(clip.find("--bd3-clip-min"), std::string::npos) << clip;
  const std::vector<double> t(3, 0.5);
  const std::vector<uint8_t> m(16, 0);
  const std::vector<int32_t> x(16, 1);
  const std::string sizes =
      test::error_of([&] { block_diffusion_batch(options(4), x.data(), 1, 16, 16, t, m, 1.0f, mb); });
  EXPECT_NE(sizes.find("noise levels"), std::string::npos) << sizes;
}
