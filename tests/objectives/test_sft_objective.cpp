// The objectives on supervised fine-tuning batches (SampleBatch::loss_mask, 1 on response tokens):
// next-token trains only the labels that are response tokens, normalised over them; masked diffusion
// (LLaDA's SFT recipe) never masks a prompt token nor weighs it, masks response tokens at the drawn
// ratio p, and weighs a masked token 1 / (p * response length of its row * B). Without a loss mask
// both objectives give what they give on pretraining batches (test_objectives.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "models/micro_batch.h"
#include "objectives/masked_diffusion.h"
#include "objectives/next_token.h"

using namespace megadlm;

namespace {

constexpr int32_t kMask = 99;
constexpr int32_t kEod = 0;

// B rows of T + 1 tokens: ids in [1, 98], row b a prompt of 2 + (first_sample + b) % (T / 2) tokens
// (mask 0) and response tokens after it (mask 1), the last (T + 1) / 4 of them eod padding.
SampleBatch sft_batch(int64_t B, int64_t T, uint64_t first_sample) {
  SampleBatch s;
  s.B = B;
  s.T = T;
  s.first_sample = first_sample;
  s.tokens.resize(static_cast<size_t>(B * (T + 1)));
  s.loss_mask.resize(s.tokens.size());
  const CounterRng rng(77, RngPurpose::Test);
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t sample = first_sample + static_cast<uint64_t>(b);
    const int64_t prompt = 2 + static_cast<int64_t>(sample % static_cast<uint64_t>(T / 2));
    for (int64_t i = 0; i <= T; ++i) {
      const size_t n = static_cast<size_t>(b * (T + 1) + i);
      const bool pad = i > T - (T + 1) / 4;
      s.tokens[n] = pad ? kEod : 1 + static_cast<int32_t>(rng.bits(sample, static_cast<uint32_t>(i))[0] % 98);
      s.loss_mask[n] = i < prompt ? 0 : 1;
    }
  }
  return s;
}

DiffusionOptions sft_options(DiffusionLoss loss, bool shift = false) {
  DiffusionOptions o;
  o.seed = 4242;
  o.mask_token = kMask;
  o.eod = kEod;
  o.eps = 1e-3f;
  o.loss = loss;
  o.varilen_prob = 0.0f;
  o.shift = shift;
  return o;
}

}  // namespace

// Over many draws: a prompt position is never masked, never a target and never weighed; a masked
// response position weighs exactly micro_batch_weight / (p * R * B), R its row's response length;
// and the masked share of the response tokens follows p.
TEST(SftObjective, DiffusionNeverMasksPromptAndWeighsByResponseLength) {
  const int64_t B = 4, T = 32;
  const float mbw = 0.5f;
  const DiffusionOptions opt = sft_options(DiffusionLoss::LLaDA);
  const MaskedDiffusion obj(opt);
  double masked = 0, expected = 0;
  MicroBatch mb;
  for (uint64_t first = 0; first < 400 * B; first += B) {
    const SampleBatch s = sft_batch(B, T, first);
    obj.prepare(s, mbw, mb);
    for (int64_t b = 0; b < B; ++b) {
      const double t = diffusion_time(opt, first + b);
      const double p = (1.0 - opt.eps) * t + opt.eps;
      int64_t R = 0;
      for (int64_t i = 0; i < T; ++i) R += s.loss_mask[b * (T + 1) + i];
      expected += p * static_cast<double>(R);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = b * T + i;
        const int32_t x = s.tokens[b * (T + 1) + i];
        if (s.loss_mask[b * (T + 1) + i] == 0) {
          ASSERT_EQ(mb.tokens[n], x) << "prompt token masked: sample " << first + b << " position " << i;
          ASSERT_EQ(mb.targets[n], kIgnoreIndex);
          ASSERT_EQ(mb.weights[n], 0.0f);
        } else if (mb.targets[n] != kIgnoreIndex) {
          ASSERT_EQ(mb.tokens[n], kMask);
          ASSERT_EQ(mb.targets[n], x);
          const double w = static_cast<float>(1.0 / p) * mbw / (static_cast<double>(R) * B);
          ASSERT_NEAR(mb.weights[n], w, 1e-6 * w);
          masked += 1;
        } else {
          ASSERT_EQ(mb.tokens[n], x);
          ASSERT_EQ(mb.weights[n], 0.0f);
        }
      }
    }
  }
  // 400 x 4 rows of about 20 response tokens: the count is within a few percent of its expectation.
  EXPECT_NEAR(masked / expected, 1.0, 0.03) << masked << " masked, " << expected << " expected";
}

// The shifted (vanilla) mode: position i's label is token i + 1, so it is eligible when loss_mask[i+1]
// is 1, and the input masked for it is token i + 1, never a prompt token.
TEST(SftObjective, DiffusionShiftedModeMasksOnlyResponseInputs) {
  const int64_t B = 3, T = 24;
  const MaskedDiffusion obj(sft_options(DiffusionLoss::LLaDA, true));
  MicroBatch mb;
  int64_t targets = 0;
  for (uint64_t first = 0; first < 200 * B; first += B) {
    const SampleBatch s = sft_batch(B, T, first);
    obj.prepare(s, 1.0f, mb);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = b * T + i;
        if (s.loss_mask[b * (T + 1) + i] == 0) {
          ASSERT_EQ(mb.tokens[n], s.tokens[b * (T + 1) + i]);
        }
        if (s.loss_mask[b * (T + 1) + i + 1] == 0) {
          ASSERT_EQ(mb.targets[n], kIgnoreIndex);
        }
        if (mb.targets[n] != kIgnoreIndex) {
          ASSERT_EQ(mb.targets[n], s.tokens[b * (T + 1) + i + 1]);
          ++targets;
        }
      }
  }
  EXPECT_GT(targets, 0);
}

// MegaDLMs' at-least-one masked token per row is a response token, and p is the realised share of
// the response.
TEST(SftObjective, DiffusionMegaDLMsForcesAResponseTokenAndUsesItsShare) {
  const int64_t B = 4, T = 32;
  const MaskedDiffusion obj(sft_options(DiffusionLoss::MegaDLMs));
  MicroBatch mb;
  for (uint64_t first = 0; first < 200 * B; first += B) {
    const SampleBatch s = sft_batch(B, T, first);
    obj.prepare(s, 1.0f, mb);
    for (int64_t b = 0; b < B; ++b) {
      int64_t R = 0, masked = 0;
      for (int64_t i = 0; i < T; ++i) {
        R += s.loss_mask[b * (T + 1) + i];
        if (mb.targets[b * T + i] == kIgnoreIndex) continue;
        ASSERT_EQ(s.loss_mask[b * (T + 1) + i], 1) << "sample " << first + b << " position " << i;
        ++masked;
      }
      ASSERT_GE(masked, 1);
      for (int64_t i = 0; i < T; ++i)
        if (mb.targets[b * T + i] != kIgnoreIndex) {
          const double p_eff = static_cast<double>(masked) / static_cast<double>(R);
          const double w = static_cast<float>(1.0 / p_eff) / (static_cast<double>(R) * B);
          ASSERT_NEAR(mb.weights[b * T + i], w, 1e-6 * w);
        }
    }
  }
}

// Next-token: position i is trained on token i + 1 only where loss_mask[i + 1] is 1, each such
// position weighing micro_batch_weight / (loss tokens of the micro-batch).
TEST(SftObjective, NextTokenTargetsOnlyResponseTokens) {
  const int64_t B = 3, T = 20;
  const float mbw = 0.25f;
  NextTokenOptions o;
  o.eod = kEod;
  const NextToken obj(o);
  MicroBatch mb;
  const SampleBatch s = sft_batch(B, T, 7);
  const ObjectiveStats st = obj.prepare(s, mbw, mb);
  int64_t loss_tokens = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) loss_tokens += s.loss_mask[b * (T + 1) + i + 1];
  ASSERT_GT(loss_tokens, 0);
  EXPECT_EQ(st.loss_tokens, static_cast<double>(loss_tokens));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      const int64_t n = b * T + i;
      EXPECT_EQ(mb.tokens[n], s.tokens[b * (T + 1) + i]);
      if (s.loss_mask[b * (T + 1) + i + 1] == 1) {
        EXPECT_EQ(mb.targets[n], s.tokens[b * (T + 1) + i + 1]) << "row " << b << " position " << i;
        EXPECT_FLOAT_EQ(mb.weights[n], mbw / static_cast<float>(loss_tokens));
      } else {
        EXPECT_EQ(mb.targets[n], kIgnoreIndex) << "row " << b << " position " << i;
        EXPECT_EQ(mb.weights[n], 0.0f);
      }
    }
}

// The same batch without its loss mask trains every position (the pretraining objective).
TEST(SftObjective, WithoutALossMaskEveryPositionTrains) {
  SampleBatch s = sft_batch(2, 16, 0);
  s.loss_mask.clear();
  const NextToken ar(NextTokenOptions{});
  MicroBatch mb;
  ar.prepare(s, 1.0f, mb);
  for (int32_t t : mb.targets) EXPECT_NE(t, kIgnoreIndex);
  const MaskedDiffusion dm(sft_options(DiffusionLoss::LLaDA));
  int64_t prompt_masked = 0;
  for (uint64_t first = 0; first < 200; first += 2) {
    SampleBatch b = sft_batch(2, 16, first);
    b.loss_mask.clear();
    dm.prepare(b, 1.0f, mb);
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t i = 0; i < 2; ++i) prompt_masked += mb.targets[r * 16 + i] != kIgnoreIndex;
  }
  EXPECT_GT(prompt_masked, 0) << "positions 0 and 1 (prompt in SFT) are masked in pretraining";
}
