// Activation recomputation gives the same gradients with less arena memory, and the memory
// estimate printed at start (train/metrics.h) matches the measured arena high-water and precision
// buffers within 15% for fp32, bf16, fp16, fp8 and under recomputation.
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "model_fixture.h"
#include "train/metrics.h"

namespace megadlm {
namespace {

using test::recompute;
using test::TinyBatch;

const ParallelContext kSingle = ParallelContext::single();

struct Measured {
  double loss;
  std::vector<float> grads;
  double arena, buffers;
};

Measured measure(const TransformerConfig& cfg, const PrecisionConfig& p, const RecomputeConfig& r, int64_t B,
                 int64_t T) {
  LanguageModel m(cfg, gpt_model_spec(cfg), kSingle);
  m.params().init(17);
  m.set_precision(p);
  m.set_recompute(r);
  const TinyBatch b(B, T, cfg.vocab_size, 5);
  Measured out;
  out.loss = m.forward_backward(b.mb(), 0.01f);
  out.grads = test::grads_of(m);
  out.arena = m.activation_high_water();
  // Also in fp32, where the policy holds nothing (the trainer's log reports the same call).
  out.buffers = m.precision() ? m.precision()->buffer_bytes() : 0.0;
  return out;
}

TEST(RecomputeGroups, UniformAndBlock) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(recompute_group_starts(recompute(RecomputeGranularity::None), 3), (V{-1, -1, -1}));
  EXPECT_EQ(recompute_group_starts(recompute(RecomputeGranularity::Selective), 3), (V{-1, -1, -1}));
  EXPECT_EQ(recompute_group_starts(recompute(RecomputeGranularity::Full), 3), (V{0, 1, 2}));
  EXPECT_EQ(recompute_group_starts(recompute(RecomputeGranularity::Full, RecomputeMethod::Uniform, 2), 5),
            (V{0, 0, 2, 2, 4}));
  EXPECT_EQ(recompute_group_starts(recompute(RecomputeGranularity::Full, RecomputeMethod::Block, 2), 5),
            (V{0, 1, -1, -1, -1}));
  EXPECT_THROW(recompute_granularity_from_name("partial"), Error);
  EXPECT_THROW(recompute_method_from_name("every"), Error);
}

TEST(Recompute, SameGradientsLessMemory) {
  for (const bool llama : {false, true}) {
    const TransformerConfig cfg = test::tiny_model(llama, 4);
    for (const PrecisionMode pm : {PrecisionMode::FP32, PrecisionMode::BF16}) {
      PrecisionConfig p;
      p.mode = pm;
      const Measured ref = measure(cfg, p, recompute(RecomputeGranularity::None), 2, 19);
      const RecomputeConfig plans[] = {recompute(RecomputeGranularity::Full),
                                       recompute(RecomputeGranularity::Full, RecomputeMethod::Uniform, 2),
                                       recompute(RecomputeGranularity::Full, RecomputeMethod::Block, 3),
                                       recompute(RecomputeGranularity::Selective)};
      for (const RecomputeConfig& r : plans) {
        const Measured got = measure(cfg, p, r, 2, 19);
        const std::string what = std::string(llama ? "llama " : "gpt2 ") + (pm == PrecisionMode::BF16 ? "bf16 " : "fp32 ") +
                                 describe_recompute(r);
        EXPECT_EQ(got.loss, ref.loss) << what;
        ASSERT_EQ(got.grads.size(), ref.grads.size());
        for (size_t i = 0; i < ref.grads.size(); ++i) ASSERT_EQ(got.grads[i], ref.grads[i]) << what << " grad " << i;
        if (r.granularity == RecomputeGranularity::Full) EXPECT_LT(got.arena, 0.8 * ref.arena) << what;
        else EXPECT_EQ(got.arena, ref.arena) << what;
        // The measured high-water falls as the estimate says.
        const MemoryOptions o{p, r};
        EXPECT_NEAR(got.arena, activation_peak_bytes(cfg, 2, 19, o), 0.15 * got.arena) << what;
      }
    }
  }
}

TEST(MemoryEstimate, MatchesMeasuredWithin15Percent) {
  for (const bool llama : {false, true}) {
    const TransformerConfig cfg = test::tiny_model(llama, 3);
    const int64_t params = parameter_count(cfg);
    struct Case {
      const char* name;
      PrecisionMode mode;
      bool products;
      RecomputeConfig r;
    };
    const Case cases[] = {{"fp32", PrecisionMode::FP32, true, recompute(RecomputeGranularity::None)},
                          {"bf16", PrecisionMode::BF16, true, recompute(RecomputeGranularity::None)},
                          {"bf16 storage", PrecisionMode::BF16, false, recompute(RecomputeGranularity::None)},
                          {"fp16", PrecisionMode::FP16, true, recompute(RecomputeGranularity::None)},
                          {"fp8", PrecisionMode::FP8, true, recompute(RecomputeGranularity::None)},
                          {"fp32 full", PrecisionMode::FP32, true, recompute(RecomputeGranularity::Full)},
                          {"bf16 full", PrecisionMode::BF16, true, recompute(RecomputeGranularity::Full)}};
    for (const Case& c : cases) {
      PrecisionConfig p;
      p.mode = c.mode;
      p.bf16_products = c.products;
      const Measured got = measure(cfg, p, c.r, 3, 21);
      const MemoryEstimate est = estimate_memory(cfg, params, 3, 21, MemoryOptions{p, c.r});
      const double measured = got.arena + got.buffers + 16.0 * static_cast<double>(params);
      const std::string what = std::string(llama ? "llama " : "gpt2 ") + c.name;
      std::printf("%-18s arena %9.0f (estimate %9.0f)  buffers %9.0f (estimate %9.0f)\n", what.c_str(), got.arena,
                  est.activations_bytes, got.buffers, est.precision_bytes);
      EXPECT_NEAR(est.activations_bytes, got.arena, 0.15 * got.arena) << what;
      EXPECT_NEAR(est.precision_bytes, got.buffers, 0.15 * got.buffers + 1) << what;
      EXPECT_NEAR(est.total(), measured, 0.15 * measured) << what;
    }
  }
}

// The bench/compare_pytorch models (whose measured activations the benchmark reports): under --bf16,
// with bf16 products and with bf16 storage, the modelled activations are at most 60% of fp32's (the
// benchmark's memory goal), so a change that makes a layer keep more in bf16 shows here. The model
// itself is held to the measurement by the test above.
TEST(MemoryEstimate, Bf16ActivationsAtMost60PercentOfFp32OnTheBenchmarkModels) {
  struct Bench {
    const char* name;
    int64_t L, C, H, F, B, T;
    bool llama;
  };
  const Bench benches[] = {{"gpt2-small", 6, 384, 6, 1536, 8, 256, false},
                           {"llama-small", 8, 512, 8, 1376, 8, 256, true},
                           {"gpt2-124m", 12, 768, 12, 3072, 4, 256, false}};
  for (const Bench& b : benches) {
    TransformerConfig c;
    c.num_layers = b.L;
    c.hidden_size = b.C;
    c.num_attention_heads = c.num_query_groups = b.H;
    c.kv_channels = b.C / b.H;
    c.ffn_hidden_size = b.F;
    c.vocab_size = 50304;
    c.max_position_embeddings = b.T;
    if (b.llama) {
      c.normalization = NormKind::RMSNorm;
      c.activation = Activation::SwiGLU;
      c.add_bias_linear = false;
      c.position_embedding = PositionEmbedding::Rope;
      c.untie_embeddings_and_output_weights = true;
    }
    PrecisionConfig fp32;
    const double a32 = activation_peak_bytes(c, b.B, b.T, MemoryOptions{fp32, {}});
    // Both of --bf16's paths: bf16 products, and the fp32 products with bf16 storage that it takes on a
    // CPU without a bf16 matmul.
    for (const bool products : {true, false}) {
      PrecisionConfig bf16;
      bf16.mode = PrecisionMode::BF16;
      bf16.bf16_products = products;
      const double a16 = activation_peak_bytes(c, b.B, b.T, MemoryOptions{bf16, {}});
      const std::string what = std::string(b.name) + (products ? " bf16 products" : " bf16 storage");
      EXPECT_LT(a16, 0.6 * a32) << what << ": " << a16 / (1 << 20) << " MiB, fp32 " << a32 / (1 << 20) << " MiB";
      EXPECT_GT(a16, 0.3 * a32) << what << ": the model lost a term";
    }
  }
}

}  // namespace
}  // namespace megadlm
