// Objectives: the masked diffusion preparation (LLaDA / MDLM / MegaDLMs), the next-token preparation,
// and Megatron's document positions and segments.
//
// The diffusion noise must be a pure function of (seed, global sample index, position): these tests
// check that property directly (the same sample in another micro-batch split gets the same inputs and
// targets), check the statistics of the masks against p = (1 - eps) t + eps, and check every loss
// weight against the formula of its variant, recomputed here in double from diffusion_time().
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "objectives/documents.h"
#include "objectives/masked_diffusion.h"
#include "objectives/next_token.h"

using namespace megadlm;

namespace {

constexpr int32_t kMask = 99;  // mask token id, never produced by random_batch
constexpr int32_t kEod = 0;

// B rows of T+1 ids in [1, 98] (no eod, no mask), reproducible from `seed`; row b belongs to global
// sample first_sample + b and its tokens depend only on that sample index, so two batches that share
// a sample share its tokens.
SampleBatch random_batch(int64_t B, int64_t T, uint64_t first_sample, uint64_t seed = 5) {
  SampleBatch s;
  s.B = B;
  s.T = T;
  s.first_sample = first_sample;
  s.tokens.resize(static_cast<size_t>(B * (T + 1)));
  const CounterRng rng(seed, RngPurpose::Test);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i <= T; ++i)
      s.tokens[static_cast<size_t>(b * (T + 1) + i)] =
          1 + static_cast<int32_t>(rng.bits(first_sample + static_cast<uint64_t>(b), static_cast<uint32_t>(i))[0] % 98);
  return s;
}

DiffusionOptions base_options(DiffusionLoss loss) {
  DiffusionOptions o;
  o.seed = 4242;
  o.mask_token = kMask;
  o.eod = kEod;
  o.eps = 1e-3f;
  o.loss = loss;
  o.varilen_prob = 0.0f;
  return o;
}

// A prepared micro-batch as these tests read it: the MicroBatch, the statistics the objective returned,
// and whether it separates documents (segment ids given).
struct PreparedBatch : MicroBatch {
  bool use_segments = false;
  ObjectiveStats stats;
};

void prepare_next_token(const SampleBatch& s, const NextTokenOptions& o, float micro_batch_weight, PreparedBatch& p) {
  p.stats = NextToken(o).prepare(s, micro_batch_weight, p);
  p.use_segments = !p.segment_ids.empty();
}

void prepare_masked_diffusion(const SampleBatch& s, const DiffusionOptions& o, float micro_batch_weight,
                              PreparedBatch& p) {
  p.stats = MaskedDiffusion(o).prepare(s, micro_batch_weight, p);
  p.use_segments = !p.segment_ids.empty();
}

double mask_prob(const DiffusionOptions& o, uint64_t sample) {
  return (1.0 - static_cast<double>(o.eps)) * diffusion_time(o, sample) + static_cast<double>(o.eps);
}

int64_t count_masked(const PreparedBatch& p, int64_t b) {
  int64_t m = 0;
  for (int64_t i = 0; i < p.T; ++i) m += p.targets[static_cast<size_t>(b * p.T + i)] != -100;
  return m;
}

// Number of non-padding positions of row b (padding carries segment id INT_MAX).
int64_t real_length(const PreparedBatch& p, int64_t b) {
  if (p.segment_ids.empty()) return p.T;  // no documents separated, no padding
  int64_t L = 0;
  for (int64_t i = 0; i < p.T; ++i) L += p.segment_ids[static_cast<size_t>(b * p.T + i)] != INT32_MAX;
  return L;
}

}  // namespace

// ---- document positions and segments (Megatron's get_ltor_masks_and_position_ids) -----------------

TEST(DocumentPositions, ResetAfterEodAndEodBelongsToItsDocument) {
  const std::vector<int32_t> in = {5, kEod, 7, 8, kEod, kEod, 9, 4};
  const int64_t T = static_cast<int64_t>(in.size());
  std::vector<int32_t> pos(T, -7), seg(T, -7);
  document_positions_and_segments(in.data(), T, kEod, true, true, pos.data(), seg.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(seg, (std::vector<int32_t>{0, 0, 1, 1, 1, 2, 3, 3}));

  std::fill(pos.begin(), pos.end(), -7);
  std::fill(seg.begin(), seg.end(), -7);
  document_positions_and_segments(in.data(), T, kEod, false, false, pos.data(), seg.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(seg, std::vector<int32_t>(T, 0));

  // The two switches are independent.
  document_positions_and_segments(in.data(), T, kEod, true, false, pos.data(), seg.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(seg, std::vector<int32_t>(T, 0));
  document_positions_and_segments(in.data(), T, kEod, false, true, pos.data(), seg.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(seg, (std::vector<int32_t>{0, 0, 1, 1, 1, 2, 3, 3}));
}

// ---- next-token ----------------------------------------------------------------------------------------

TEST(NextToken, ShiftedTargetsAndMeanWeights) {
  const int64_t B = 3, T = 11;
  SampleBatch s = random_batch(B, T, 40);
  s.tokens[2] = kEod;  // row 0, position 2
  NextTokenOptions o;
  o.eod = kEod;
  PreparedBatch p;
  prepare_next_token(s, o, 0.25f, p);
  ASSERT_EQ(p.tokens.size(), static_cast<size_t>(B * T));
  EXPECT_FALSE(p.use_segments);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      const size_t n = static_cast<size_t>(b * T + i);
      EXPECT_EQ(p.tokens[n], s.tokens[static_cast<size_t>(b * (T + 1) + i)]);
      EXPECT_EQ(p.targets[n], s.tokens[static_cast<size_t>(b * (T + 1) + i + 1)]);
      EXPECT_EQ(p.positions[n], i);
      EXPECT_FLOAT_EQ(p.weights[n], 0.25f / static_cast<float>(B * T));
    }
  EXPECT_EQ(p.stats.loss_tokens, static_cast<double>(B * T));
  EXPECT_EQ(p.stats.sequences, static_cast<double>(B));
}

TEST(NextToken, EodMaskLossDropsPositionsWhoseInputIsEod) {
  const int64_t B = 2, T = 9;
  SampleBatch s = random_batch(B, T, 7);
  // Row 0: eod at inputs 3 and 8; row 1: eod only at position T (the last label, never an input).
  s.tokens[3] = kEod;
  s.tokens[8] = kEod;
  s.tokens[static_cast<size_t>((T + 1) + T)] = kEod;
  NextTokenOptions o;
  o.eod = kEod;
  o.eod_mask_loss = true;
  o.reset_position_ids = true;
  o.reset_attention_mask = true;
  PreparedBatch p;
  prepare_next_token(s, o, 1.0f, p);
  const int64_t loss_tokens = B * T - 2;
  EXPECT_EQ(p.stats.loss_tokens, static_cast<double>(loss_tokens));
  EXPECT_TRUE(p.use_segments);
  double wsum = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      const size_t n = static_cast<size_t>(b * T + i);
      const bool dropped = b == 0 && (i == 3 || i == 8);
      if (dropped) {
        EXPECT_EQ(p.targets[n], -100) << "position " << i;
        EXPECT_EQ(p.weights[n], 0.0f);
      } else {
        EXPECT_EQ(p.targets[n], s.tokens[static_cast<size_t>(b * (T + 1) + i + 1)]);
        EXPECT_FLOAT_EQ(p.weights[n], 1.0f / static_cast<float>(loss_tokens));
      }
      wsum += p.weights[n];
    }
  EXPECT_NEAR(wsum, 1.0, 1e-6);
  // The label eod (row 1, position T-1 predicts eod) keeps its loss: only eod *inputs* are dropped.
  EXPECT_EQ(p.targets[static_cast<size_t>(T + T - 1)], kEod);
  // Positions and segments follow the documents of row 0.
  EXPECT_EQ(p.positions[3], 3);
  EXPECT_EQ(p.positions[4], 0);
  EXPECT_EQ(p.segment_ids[3], 0);
  EXPECT_EQ(p.segment_ids[4], 1);
  EXPECT_EQ(p.segment_ids[8], 1);
  EXPECT_EQ(p.positions[static_cast<size_t>(T + 5)], 5);  // row 1 has no eod input
}

// ---- masked diffusion: noise depends only on (seed, sample, position) ------------------------------

TEST(MaskedDiffusion, SameSampleSameMaskWhateverTheMicroBatchSplit) {
  for (DiffusionLoss loss : {DiffusionLoss::LLaDA, DiffusionLoss::MDLM, DiffusionLoss::MegaDLMs}) {
    DiffusionOptions o = base_options(loss);
    o.varilen_prob = 0.4f;  // the variable length must follow the sample too
    o.global_batch_size = 8;
    const int64_t T = 24;
    PreparedBatch whole, first, second;
    prepare_masked_diffusion(random_batch(8, T, 160), o, 1.0f, whole);
    prepare_masked_diffusion(random_batch(3, T, 160), o, 0.5f, first);
    prepare_masked_diffusion(random_batch(5, T, 163), o, 0.5f, second);
    for (int64_t b = 0; b < 8; ++b) {
      const PreparedBatch& part = b < 3 ? first : second;
      const int64_t pb = b < 3 ? b : b - 3;
      for (int64_t i = 0; i < T; ++i) {
        const size_t n = static_cast<size_t>(b * T + i), m = static_cast<size_t>(pb * T + i);
        ASSERT_EQ(whole.tokens[n], part.tokens[m]) << "sample " << 160 + b << " position " << i;
        ASSERT_EQ(whole.targets[n], part.targets[m]) << "sample " << 160 + b << " position " << i;
        ASSERT_EQ(whole.segment_ids[n], part.segment_ids[m]);
        ASSERT_EQ(whole.positions[n], part.positions[m]);
      }
    }
    EXPECT_NEAR(whole.stats.sum_t, first.stats.sum_t + second.stats.sum_t, 1e-12);
    EXPECT_EQ(whole.stats.loss_tokens, first.stats.loss_tokens + second.stats.loss_tokens);
  }
  // And a different sample index gives a different mask (the index is really used).
  DiffusionOptions o = base_options(DiffusionLoss::LLaDA);
  PreparedBatch a, b;
  prepare_masked_diffusion(random_batch(1, 64, 10), o, 1.0f, a);
  SampleBatch moved = random_batch(1, 64, 10);
  moved.first_sample = 11;  // same tokens, next sample index
  prepare_masked_diffusion(moved, o, 1.0f, b);
  EXPECT_NE(a.targets, b.targets);
}

TEST(MaskedDiffusion, RealisedMaskFractionTracksP) {
  DiffusionOptions o = base_options(DiffusionLoss::LLaDA);
  o.eps = 0.1f;
  const int64_t B = 2000, T = 64;
  PreparedBatch p;
  prepare_masked_diffusion(random_batch(B, T, 1000), o, 1.0f, p);
  double sum_frac = 0, sum_p = 0, sum_t = 0, lo_frac = 0, lo_p = 0, hi_frac = 0, hi_p = 0;
  int64_t lo_n = 0, hi_n = 0, masked_total = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double t = diffusion_time(o, 1000 + static_cast<uint64_t>(b));
    ASSERT_GE(t, 0.0);
    ASSERT_LT(t, 1.0);
    const double pb = mask_prob(o, 1000 + static_cast<uint64_t>(b));
    const int64_t m = count_masked(p, b);
    masked_total += m;
    const double f = static_cast<double>(m) / static_cast<double>(T);
    sum_frac += f;
    sum_p += pb;
    sum_t += t;
    if (pb < 0.3) {
      lo_frac += f;
      lo_p += pb;
      ++lo_n;
    } else if (pb > 0.7) {
      hi_frac += f;
      hi_p += pb;
      ++hi_n;
    }
  }
  // Mean over rows: the standard error is ~0.0015, so 0.01 is a wide but meaningful margin.
  EXPECT_NEAR(sum_frac / B, sum_p / B, 0.01);
  EXPECT_NEAR(sum_p / B, 0.9 * 0.5 + 0.1, 0.03);  // t ~ U(0, 1)
  EXPECT_NEAR(sum_t, p.stats.sum_t, 1e-6 * B);
  EXPECT_EQ(p.stats.loss_tokens, static_cast<double>(masked_total));
  // The fraction follows each row's own p, not only on average.
  ASSERT_GT(lo_n, 200);
  ASSERT_GT(hi_n, 200);
  EXPECT_NEAR(lo_frac / lo_n, lo_p / lo_n, 0.02);
  EXPECT_NEAR(hi_frac / hi_n, hi_p / hi_n, 0.02);
}

// ---- masked diffusion: LLaDA -----------------------------------------------------------------------

TEST(MaskedDiffusion, LLaDAWeightsAndMasks) {
  DiffusionOptions o = base_options(DiffusionLoss::LLaDA);
  const int64_t B = 6, T = 37;
  const float mbw = 0.25f;
  const SampleBatch s = random_batch(B, T, 77);
  PreparedBatch p;
  prepare_masked_diffusion(s, o, mbw, p);
  EXPECT_FALSE(p.use_segments);
  const double ce = 2.75;  // the same cross-entropy at every token
  double weighted = 0, formula = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double pb = mask_prob(o, 77 + static_cast<uint64_t>(b));
    for (int64_t i = 0; i < T; ++i) {
      const size_t n = static_cast<size_t>(b * T + i);
      const int32_t x0 = s.tokens[static_cast<size_t>(b * (T + 1) + i)];
      EXPECT_EQ(p.positions[n], i);
      if (p.targets[n] != -100) {
        EXPECT_EQ(p.targets[n], x0);
        EXPECT_EQ(p.tokens[n], kMask);
        const double w = 1.0 / (pb * B * T) * mbw;
        EXPECT_NEAR(p.weights[n], w, 1e-6 * w);
        formula += ce / pb;  // LLaDA: sum over masked tokens of CE / p ...
      } else {
        EXPECT_EQ(p.tokens[n], x0);
        EXPECT_EQ(p.weights[n], 0.0f);
      }
      weighted += static_cast<double>(p.weights[n]) * ce;
    }
  }
  formula = formula / static_cast<double>(B * T) * mbw;  // ... divided by B * L
  EXPECT_GT(p.stats.loss_tokens, 0);
  EXPECT_NEAR(weighted, formula, 1e-6 * formula);
}

TEST(MaskedDiffusion, NeedsAMaskToken) {
  DiffusionOptions o = base_options(DiffusionLoss::LLaDA);
  o.mask_token = -1;
  PreparedBatch p;
  EXPECT_THROW(prepare_masked_diffusion(random_batch(1, 8, 0), o, 1.0f, p), Error);
  EXPECT_THROW(diffusion_loss_from_name("elbo"), Error);
  try {
    diffusion_loss_from_name("elbo");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dlm-loss"), std::string::npos) << e.what();
  }
  EXPECT_EQ(diffusion_loss_from_name("mdlm"), DiffusionLoss::MDLM);
}

// ---- masked diffusion: MDLM -------------------------------------------------------------------------

TEST(MaskedDiffusion, MDLMTimesAreAntitheticAcrossTheGlobalBatch) {
  DiffusionOptions o = base_options(DiffusionLoss::MDLM);
  const int64_t GB = 8;
  o.global_batch_size = GB;
  for (uint64_t batch : {2u, 3u}) {
    std::vector<double> t;
    for (int64_t i = 0; i < GB; ++i) t.push_back(diffusion_time(o, batch * GB + static_cast<uint64_t>(i)));
    std::sort(t.begin(), t.end());
    ASSERT_GE(t.front(), 0.0);
    ASSERT_LT(t.back(), 1.0);
    for (int64_t i = 1; i < GB; ++i) EXPECT_NEAR(t[i] - t[i - 1], 1.0 / GB, 1e-12);
    EXPECT_NEAR(t.front() + 1.0 - t.back(), 1.0 / GB, 1e-12);  // evenly spaced mod 1
  }
  // Two global batches use different offsets.
  EXPECT_NE(std::fmod(diffusion_time(o, 16), 1.0 / GB), std::fmod(diffusion_time(o, 24), 1.0 / GB));
}

TEST(MaskedDiffusion, MDLMNormalisesByRealTokens) {
  DiffusionOptions o = base_options(DiffusionLoss::MDLM);
  o.global_batch_size = 16;
  o.varilen_prob = 1.0f;
  const int64_t B = 8, T = 20;
  const float mbw = 0.5f;
  PreparedBatch p;
  prepare_masked_diffusion(random_batch(B, T, 48), o, mbw, p);
  int64_t real = 0;
  for (int64_t b = 0; b < B; ++b) real += real_length(p, b);
  ASSERT_LT(real, B * T);  // some padding, so real tokens and B*T differ
  EXPECT_EQ(p.stats.real_tokens, static_cast<double>(real));
  int64_t masked = 0;
  for (int64_t b = 0; b < B; ++b) {
    const double pb = mask_prob(o, 48 + static_cast<uint64_t>(b));
    for (int64_t i = 0; i < T; ++i) {
      const size_t n = static_cast<size_t>(b * T + i);
      if (p.targets[n] == -100) {
        EXPECT_EQ(p.weights[n], 0.0f);
        continue;
      }
      ++masked;
      const double w = 1.0 / (pb * static_cast<double>(real)) * mbw;
      EXPECT_NEAR(p.weights[n], w, 1e-6 * w);
    }
  }
  EXPECT_GT(masked, 0);
}

// ---- masked diffusion: MegaDLMs ---------------------------------------------------------------------

TEST(MaskedDiffusion, MegaDLMsMasksAtLeastOneTokenAndUsesTheRealisedFraction) {
  // Find a sample whose t is so small that LLaDA's rule masks nothing in a row of T tokens (eps = 0).
  const int64_t T = 16;
  DiffusionOptions llada = base_options(DiffusionLoss::LLaDA);
  llada.eps = 0.0f;
  DiffusionOptions mega = llada;
  mega.loss = DiffusionLoss::MegaDLMs;
  uint64_t sample = 0;
  bool found = false;
  for (uint64_t s = 1; s < 200000 && !found; ++s) {
    if (diffusion_time(llada, s) > 0.003) continue;
    SampleBatch one = random_batch(1, T, s);
    PreparedBatch p;
    prepare_masked_diffusion(one, llada, 1.0f, p);
    if (count_masked(p, 0) == 0) {
      sample = s;
      found = true;
    }
  }
  ASSERT_TRUE(found);
  // A batch of 3 rows: the small-t row in the middle, flanked by ordinary rows.
  const int64_t B = 3;
  SampleBatch s = random_batch(B, T, sample - 1);
  const float mbw = 0.75f;
  PreparedBatch p;
  prepare_masked_diffusion(s, mega, mbw, p);
  ASSERT_EQ(count_masked(p, 1), 1);
  // The one masked token is the position whose mask draw came closest to p.
  const CounterRng rng(mega.seed, RngPurpose::DiffusionMask);
  int64_t argmin = 0;
  for (int64_t i = 1; i < T; ++i)
    if (rng.uniform(sample, static_cast<uint32_t>(i)) < rng.uniform(sample, static_cast<uint32_t>(argmin))) argmin = i;
  const size_t n = static_cast<size_t>(T + argmin);
  EXPECT_EQ(p.targets[n], s.tokens[static_cast<size_t>((T + 1) + argmin)]);
  EXPECT_EQ(p.tokens[n], kMask);
  // p = realised fraction = 1/T, so the weight is T / (B*T) * mbw.
  EXPECT_FLOAT_EQ(p.weights[n], static_cast<float>(1.0 / B * mbw));
  // The other rows: p is their own realised fraction.
  for (int64_t b : {0, 2}) {
    const int64_t m = count_masked(p, b);
    if (m == 0) continue;
    const double w = static_cast<double>(T) / static_cast<double>(m) / static_cast<double>(B * T) * mbw;
    for (int64_t i = 0; i < T; ++i) {
      const size_t k = static_cast<size_t>(b * T + i);
      if (p.targets[k] != -100) {
        EXPECT_NEAR(p.weights[k], w, 1e-6 * w);
      }
    }
  }
  // Every row of a large batch at eps = 0 has at least one masked token.
  PreparedBatch many;
  prepare_masked_diffusion(random_batch(500, 4, 0), mega, 1.0f, many);
  for (int64_t b = 0; b < 500; ++b) ASSERT_GE(count_masked(many, b), 1) << "row " << b;
}

// ---- masked diffusion: variable length ----------------------------------------------------------------

TEST(MaskedDiffusion, VariableLengthAlwaysPadsAndNeverWhenOff) {
  DiffusionOptions o = base_options(DiffusionLoss::LLaDA);
  o.eps = 0.5f;  // plenty of masks, so that padding positions would show if they were masked
  o.varilen_prob = 1.0f;
  o.reset_position_ids = true;
  o.reset_attention_mask = true;
  const int64_t B = 200, T = 32;
  SampleBatch s = random_batch(B, T, 300);
  for (int64_t b = 0; b < B; ++b) s.tokens[static_cast<size_t>(b * (T + 1) + 5)] = kEod;  // two documents
  PreparedBatch p;
  prepare_masked_diffusion(s, o, 1.0f, p);
  EXPECT_TRUE(p.use_segments);
  int64_t shorter = 0, real = 0;
  double mean_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = real_length(p, b);
    ASSERT_GE(L, 1);
    ASSERT_LE(L, T);
    shorter += L < T;
    real += L;
    mean_len += static_cast<double>(L) / B;
    for (int64_t i = 0; i < T; ++i) {
      const size_t n = static_cast<size_t>(b * T + i);
      if (i < L) {
        // Real tokens: the document segments (0 up to the eod at 5, then 1), never the padding id.
        EXPECT_EQ(p.segment_ids[n], i <= 5 ? 0 : 1);
      } else {
        EXPECT_EQ(p.segment_ids[n], INT32_MAX) << "padding is a suffix";
        EXPECT_EQ(p.targets[n], -100);
        EXPECT_EQ(p.weights[n], 0.0f);
        EXPECT_EQ(p.tokens[n], s.tokens[static_cast<size_t>(b * (T + 1) + i)]);
      }
    }
  }
  EXPECT_EQ(p.stats.real_tokens, static_cast<double>(real));
  // L is uniform on [1, T]: only 1 row in T keeps its full length.
  EXPECT_GE(shorter, B * 85 / 100);
  EXPECT_NEAR(mean_len, (T + 1) / 2.0, 2.5);

  // Off: no row is cut, no segments unless documents ask for them.
  o.varilen_prob = 0.0f;
  o.reset_attention_mask = false;
  prepare_masked_diffusion(s, o, 1.0f, p);
  EXPECT_FALSE(p.use_segments);
  EXPECT_EQ(p.stats.real_tokens, static_cast<double>(B * T));
  for (int32_t seg : p.segment_ids) ASSERT_EQ(seg, 0);
}

// ---- masked diffusion: shifted ("vanilla") mode ---------------------------------------------------------

TEST(MaskedDiffusion, ShiftModePredictsTheNextTokenWhichIsMaskedInTheInput) {
  for (DiffusionLoss loss : {DiffusionLoss::LLaDA, DiffusionLoss::MegaDLMs}) {
    DiffusionOptions o = base_options(loss);
    o.shift = true;
    const int64_t B = 16, T = 19;
    const SampleBatch s = random_batch(B, T, 900);
    PreparedBatch p;
    prepare_masked_diffusion(s, o, 1.0f, p);
    int64_t masked = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int32_t* row = s.tokens.data() + b * (T + 1);
      const size_t r = static_cast<size_t>(b * T);
      EXPECT_EQ(p.tokens[r], row[0]) << "the first input has no previous target";
      for (int64_t i = 0; i < T; ++i) {
        const int32_t tgt = p.targets[r + i];
        if (tgt != -100) {
          EXPECT_EQ(tgt, row[i + 1]);
          ++masked;
        }
        if (i + 1 < T) {
          const bool input_masked = p.tokens[r + i + 1] == kMask;
          EXPECT_EQ(input_masked, tgt != -100) << "row " << b << " position " << i;
          if (!input_masked) {
            EXPECT_EQ(p.tokens[r + i + 1], row[i + 1]);
          }
        }
      }
      if (loss == DiffusionLoss::LLaDA) {
        const double pb = mask_prob(o, 900 + static_cast<uint64_t>(b));
        for (int64_t i = 0; i < T; ++i) {
          if (p.targets[r + i] != -100) {
            EXPECT_NEAR(p.weights[r + i], 1.0 / (pb * B * T), 1e-6 / (pb * B * T));
          }
        }
      } else {
        EXPECT_GE(count_masked(p, b), 1);
      }
    }
    EXPECT_GT(masked, 0);
  }
}
