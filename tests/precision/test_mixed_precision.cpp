// The precision policy in a whole model: bf16 / fp16 / fp8 losses and gradients against fp32, the
// once-per-step weight copies, training with each recipe (fp16 through the loss scaler), and the
// smaller saved activations.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "model_fixture.h"
#include "optim/adamw.h"
#include "kernels/backend.h"
#include "optim/loss_scaler.h"

namespace megadlm {
namespace {

using test::TinyBatch;

const ParallelContext kSingle = ParallelContext::single();

PrecisionConfig mode(PrecisionMode m, bool bf16_products = true, Fp8Format f = Fp8Format::Hybrid) {
  PrecisionConfig c;
  c.mode = m;
  c.bf16_products = bf16_products;
  c.fp8.format = f;
  c.fp8.amax_history_len = 4;
  c.fp8.amax_algo = Fp8AmaxAlgo::Max;
  return c;
}

struct RunResult {
  double loss;
  std::vector<float> grads;
  size_t high_water;
};

// One forward_backward after `warmup` steps that only advance the precision state (fp8 scales).
RunResult run_once(bool llama, const PrecisionConfig& p, int warmup = 0) {
  const TransformerConfig cfg = test::tiny_model(llama);
  LanguageModel m(cfg, gpt_model_spec(cfg), kSingle);
  m.params().init(5);
  m.set_precision(p);
  const TinyBatch b(3, 17, cfg.vocab_size, 9);
  for (int i = 0; i < warmup; ++i) {
    m.forward_backward(b.mb(), 1.0f / (3 * 17));
    m.precision()->weights_updated();
  }
  m.params().zero_grads();
  RunResult r;
  r.loss = m.forward_backward(b.mb(), 1.0f / (3 * 17));
  r.grads = test::grads_of(m);
  r.high_water = static_cast<size_t>(m.activation_high_water());
  return r;
}

TEST(MixedPrecision, LossAndGradientsCloseToFp32) {
  for (const bool llama : {false, true}) {
    const RunResult ref = run_once(llama, mode(PrecisionMode::FP32));
    struct Case {
      const char* name;
      PrecisionConfig p;
      int warmup;
      double loss_tol, grad_tol;
    };
    const Case cases[] = {
        {"bf16", mode(PrecisionMode::BF16), 0, 5e-3, 3e-2},
        {"bf16 storage", mode(PrecisionMode::BF16, false), 0, 1e-6, 3e-2},
        {"fp16", mode(PrecisionMode::FP16), 0, 1e-3, 5e-3},
        {"fp8 hybrid", mode(PrecisionMode::FP8, true, Fp8Format::Hybrid), 2, 3e-2, 0.25},
        {"fp8 e4m3", mode(PrecisionMode::FP8, true, Fp8Format::E4M3), 2, 3e-2, 0.2},
    };
    for (const Case& c : cases) {
      const RunResult r = run_once(llama, c.p, c.warmup);
      const std::string what = std::string(llama ? "llama " : "gpt2 ") + c.name;
      EXPECT_NEAR(r.loss, ref.loss, c.loss_tol * std::fabs(ref.loss)) << what;
      const double e = test::rel_l2(r.grads, ref.grads);
      EXPECT_LT(e, c.grad_tol) << what;
      EXPECT_GT(e, 0.0) << what << ": the narrow format changed nothing";
      for (float g : r.grads) ASSERT_TRUE(std::isfinite(g)) << what;
    }
  }
}

// The transient arena is regrown after the first call and every layer call reuses it: a second
// forward_backward on the same batch and weights must give bit for bit the same loss and gradients
// (a read of memory the call did not write would show here). GPT-2 and LLaMA style, and MoE layers
// (whose experts stay fp32 and keep their input in the arena) between dense ones.
TEST(MixedPrecision, RepeatedStepIsBitwiseAndMoELayersTrain) {
  for (const int kind : {0, 1, 2}) {
    TransformerConfig cfg = test::tiny_model(kind == 1);
    if (kind == 2) {
      cfg.moe.num_experts = 4;
      cfg.moe.topk = 2;
      cfg.moe.layer_freq = 2;  // layers 0 and 2 MoE, layer 1 dense
    }
    const char* name = kind == 0 ? "gpt2" : kind == 1 ? "llama" : "gpt2 moe";
    const TinyBatch b(3, 17, cfg.vocab_size, 9);
    auto grads_of_step = [&](LanguageModel& m, double& loss) {
      m.params().zero_grads();
      loss = m.forward_backward(b.mb(), 1.0f / (3 * 17));
      return test::grads_of(m);
    };
    LanguageModel ref(cfg, gpt_model_spec(cfg), kSingle);
    ref.params().init(5);
    double ref_loss = 0;
    const std::vector<float> ref_grads = grads_of_step(ref, ref_loss);
    for (const PrecisionConfig& p : {mode(PrecisionMode::BF16), mode(PrecisionMode::BF16, false),
                                     mode(PrecisionMode::FP16), mode(PrecisionMode::FP8)}) {
      LanguageModel m(cfg, gpt_model_spec(cfg), kSingle);
      m.params().init(5);
      m.set_precision(p);
      double l1 = 0, l2 = 0;
      const std::vector<float> g1 = grads_of_step(m, l1);
      const size_t arena_allocs = m.arena().heap_allocations();
      const size_t transient_allocs = m.precision()->transient().heap_allocations();
      const std::vector<float> g2 = grads_of_step(m, l2);
      const std::string what = std::string(name) + " " + describe_precision(p);
      // Both arenas were sized by the first step: the second makes no heap allocation.
      EXPECT_EQ(m.arena().heap_allocations(), arena_allocs) << what;
      EXPECT_EQ(m.precision()->transient().heap_allocations(), transient_allocs) << what;
      EXPECT_GT(transient_allocs, 0u) << what << ": the transient arena was not used";
      EXPECT_EQ(l1, l2) << what;
      EXPECT_EQ(g1, g2) << what;
      EXPECT_NEAR(l1, ref_loss, 3e-2 * std::fabs(ref_loss)) << what;
      EXPECT_LT(test::rel_l2(g1, ref_grads), 0.25) << what;
      for (float g : g1) ASSERT_TRUE(std::isfinite(g)) << what;
    }
  }
}

// AdamW writes the bf16 weight copies on its pass: the next step makes no copy by a cast, and its loss
// and gradients are bitwise those of a twin whose copies are cast from the updated weights.
TEST(MixedPrecision, AdamWWritesTheBf16Copies) {
  for (const bool llama : {false, true}) {
    const TransformerConfig cfg = test::tiny_model(llama);
    const TinyBatch b(3, 17, cfg.vocab_size, 9);
    LanguageModel a(cfg, gpt_model_spec(cfg), kSingle), c(cfg, gpt_model_spec(cfg), kSingle);
    AdamWConfig oc;
    AdamW opt_a(a.params(), oc), opt_c(c.params(), oc);
    for (LanguageModel* m : {&a, &c}) {
      m->params().init(5);
      m->set_precision(mode(PrecisionMode::BF16));
    }
    double la = 0, lc = 0;
    int64_t casts = 0;
    for (int step = 0; step < 3; ++step) {
      a.params().zero_grads();
      c.params().zero_grads();
      la = a.forward_backward(b.mb(), 1.0f / (3 * 17));
      lc = c.forward_backward(b.mb(), 1.0f / (3 * 17));
      if (step > 0) {
        EXPECT_EQ(a.precision()->bf16_casts(), casts) << "step " << step << ": a copy was cast";
      }
      ASSERT_EQ(la, lc) << "step " << step;
      ASSERT_EQ(test::grads_of(a), test::grads_of(c)) << "step " << step;
      const std::vector<uint16_t*> targets = a.precision()->bf16_copy_targets();
      int copies = 0;
      for (uint16_t* t : targets) copies += t != nullptr;
      EXPECT_GT(copies, 0);
      opt_a.apply(1e-3, opt_a.grad_norm(), targets);
      a.precision()->weights_updated(true);
      casts = a.precision()->bf16_casts();
      opt_c.apply(1e-3, opt_c.grad_norm());
      c.precision()->weights_updated();
    }
    EXPECT_GT(c.precision()->bf16_casts(), a.precision()->bf16_casts());
  }
}

TEST(MixedPrecision, WeightCopiesAreRemadeOncePerStep) {
  const TransformerConfig cfg = test::tiny_model(false);
  for (const PrecisionMode pm : {PrecisionMode::BF16, PrecisionMode::FP16, PrecisionMode::FP8}) {
    LanguageModel m(cfg, gpt_model_spec(cfg), kSingle);
    m.params().init(5);
    m.set_precision(mode(pm));
    const TinyBatch b(2, 9, cfg.vocab_size, 3);
    const double l0 = m.forward_loss(b.mb());
    // A change of the fp32 master weights is not seen until weights_updated(): the products use the
    // copy made for this step.
    const int w = m.params().find("layers.0.mlp.fc1.weight");
    ASSERT_GE(w, 0);
    float* v = m.params().value(w).data<float>();
    for (int64_t i = 0; i < m.params().value(w).numel(); ++i) v[i] *= 3.0f;
    EXPECT_EQ(m.forward_loss(b.mb()), l0) << static_cast<int>(pm);
    m.precision()->weights_updated();
    EXPECT_NE(m.forward_loss(b.mb()), l0) << static_cast<int>(pm);
  }
}

// A few dozen AdamW steps on one batch: the loss must fall well below its start.
double train(bool llama, const PrecisionConfig& p, int steps, double* first_loss, int64_t* skipped = nullptr) {
  const TransformerConfig cfg = test::tiny_model(llama, 2);
  LanguageModel m(cfg, gpt_model_spec(cfg), kSingle);
  m.params().init(11);
  m.set_precision(p);
  AdamWConfig ac;
  ac.weight_decay = 0.0f;
  AdamW opt(m.params(), ac);
  LossScalerConfig sc;
  sc.initial_scale = 65536.0 * 1024;  // overflows at first, then backs off
  sc.window = 10;
  LossScaler scaler(sc);
  const bool fp16 = p.mode == PrecisionMode::FP16;
  const TinyBatch b(4, 16, cfg.vocab_size, 21);
  const float per_token = 1.0f / (4 * 16);
  double loss = 0;
  int64_t skips = 0;
  for (int s = 0; s < steps; ++s) {
    m.params().zero_grads();
    loss = m.forward_backward(b.mb(), per_token * (fp16 ? static_cast<float>(scaler.scale()) : 1.0f)) * per_token;
    if (s == 0) *first_loss = loss;
    bool ok = true;
    if (fp16) {
      ok = scaler.unscale_and_check(cpu_backend(), m.params().grads(), m.params().numel());
      scaler.update(!ok);
      skips += ok ? 0 : 1;
    }
    if (ok) opt.step(3e-3);
    m.precision()->weights_updated();
  }
  if (skipped) *skipped = skips;
  return loss;
}

TEST(MixedPrecision, TinyModelTrainsWithEachRecipe) {
  struct Case {
    const char* name;
    PrecisionConfig p;
  };
  const Case cases[] = {{"bf16", mode(PrecisionMode::BF16)},
                        {"fp16", mode(PrecisionMode::FP16)},
                        {"fp8 hybrid", mode(PrecisionMode::FP8, true, Fp8Format::Hybrid)},
                        {"fp8 e4m3", mode(PrecisionMode::FP8, true, Fp8Format::E4M3)}};
  double first32 = 0;
  const double last32 = train(false, mode(PrecisionMode::FP32), 40, &first32);
  ASSERT_LT(last32, 0.6 * first32);
  for (const Case& c : cases) {
    double first = 0;
    int64_t skipped = 0;
    const double last = train(false, c.p, 40, &first, &skipped);
    EXPECT_LT(last, 0.6 * first) << c.name;
    EXPECT_LT(std::fabs(last - last32), 0.1 * first32) << c.name << " ends near fp32";
    if (c.p.mode == PrecisionMode::FP16) {
      // 2^26 overflows the fp16 gradients: skipped until the scale backs off (hysteresis 2).
      EXPECT_GE(skipped, 2) << c.name;
      EXPECT_LT(skipped, 20) << c.name;
    }
  }
}

TEST(MixedPrecision, SavedActivationsTakeLessMemory) {
  for (const bool llama : {false, true}) {
    const size_t fp32 = run_once(llama, mode(PrecisionMode::FP32)).high_water;
    const size_t bf16 = run_once(llama, mode(PrecisionMode::BF16)).high_water;
    const size_t fp8 = run_once(llama, mode(PrecisionMode::FP8)).high_water;
    // Arena and transient arena together. bf16 keeps narrow copies of q, k, v, the attention output
    // and the MLP hidden and remakes fc2's input; fp8 keeps E4M3 Linear inputs but fc2's own copy.
    // (On these tiny models the fixed part, the output layer and one layer's temporaries, weighs more
    // than on the benchmark models, where bf16 comes to about half of fp32: docs/precision.md.)
    EXPECT_LT(bf16, 0.75 * static_cast<double>(fp32)) << (llama ? "llama" : "gpt2");
    EXPECT_LT(fp8, 0.8 * static_cast<double>(fp32)) << (llama ? "llama" : "gpt2");
  }
}

}  // namespace
}  // namespace megadlm
