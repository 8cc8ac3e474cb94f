// The nn/ modules on the CUDA backend (kernels/backend.h): a tiny LanguageModel built on the CPU and on
// the GPU from the same seed must give the same loss, per-token losses and every parameter's gradient
// after forward_backward, and the same AdamW step. GPT-2 style (LayerNorm, GELU, learned positions,
// biases, tied output) and LLaMA style (RMSNorm, SwiGLU, RoPE, GQA, QK-norm, untied output), the
// autoregressive (causal) and the diffusion (bidirectional, 1/t weights, packed documents) objectives,
// fp32 and --bf16. Then the trainer: `--device cuda` runs, its losses follow the CPU run's, a
// checkpoint saved from the GPU resumes to the same next step, and --load-hf loads onto the GPU.
//
// Without a GPU (or in a build without -DMEGADLM_CUDA=ON) the comparisons skip with the reason; the
// errors that name --device run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "checkpoint/model_loader.h"
#include "core/device_memory.h"
#include "core/philox.h"
#include "infer/likelihood.h"
#include "infer/sampling.h"
#include "kernels/dispatch.h"
#include "models/language_model.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "model_util.h"
#include "optim/adamw.h"
#include "test_util.h"
#include "train_fixture.h"
#include "emulated_device.h"

using namespace megadlm;

namespace {

#define SKIP_WITHOUT_GPU()                                                                                      \
  do {                                                                                                          \
    if (!cuda_available())                                                                                      \
      GTEST_SKIP() << (cuda_compiled() ? "no CUDA device visible" : "this build has no CUDA backend")           \
                   << ": CPU-vs-CUDA model comparisons skipped";                                                \
  } while (0)

constexpr int64_t kV = 67;  // awkward on purpose
constexpr int64_t kB = 2, kT = 16;

TransformerConfig tiny(bool llama) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 16;
  c.ffn_hidden_size = 96;
  c.vocab_size = kV;
  c.max_position_embeddings = 32;
  c.init_method_std = 0.2f;
  if (llama) {
    c.position_embedding = PositionEmbedding::Rope;
    c.normalization = NormKind::RMSNorm;
    c.activation = Activation::SwiGLU;
    c.qk_layernorm = true;
    c.num_query_groups = 2;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
  }
  return c;
}

// The emulated recipes (nn/precision.h), each around fp32 products on either device.
enum class Recipe { None, Fp16, Fp8E4m3, Fp8Hybrid, Bf16StorageOnly };

struct Case {
  bool llama = false;
  bool diffusion = false;
  bool bf16 = false;
  bool recompute = false;  // full recomputation of every layer, on the device model only
  int moe = 0;             // 0 dense; 1 every layer MoE (top-2 of 4, aux + z loss); 2 see with_moe()
  Recipe recipe = Recipe::None;  // instead of fp32 / bf16
  bool low_precision() const { return bf16 || recipe != Recipe::None; }
};

// The MoE variants: 1 puts a softmax top-2-of-4 router with aux and z losses in every layer; 2 makes the
// first layer MoE and the second dense, with a shared expert, a sigmoid router and a capacity of one
// (tokens dropped by probability, the rest padded to capacity), so that the permute writes zero rows.
void with_moe(TransformerConfig& c, int moe) {
  if (moe == 0) return;
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 48;
  c.moe.aux_loss_coeff = 1e-2f;
  c.moe.z_loss_coeff = 1e-3f;
  if (moe == 2) {
    c.moe.layer_freq = 2;
    c.moe.shared_expert_size = 40;
    c.moe.score_function = MoEScoreFunction::Sigmoid;
    c.moe.capacity_factor = 1.0;
    c.moe.pad_to_capacity = true;
  }
}

// A micro-batch whose arrays outlive the call: AR targets are the next tokens (-100 at each
// sequence's end); DLM targets are the masked tokens weighted 1/t per sequence, the rest -100, and the
// LLaMA case packs two documents per sequence (segment ids, positions restarting).
struct HostBatch {
  std::vector<int32_t> tokens, positions, segments, targets;
  std::vector<float> weights;
  MicroBatch mb;
};

HostBatch make_batch(const Case& c, uint64_t seed) {
  HostBatch h;
  const int64_t N = kB * kT;
  const CounterRng rng(seed, RngPurpose::Test);
  h.tokens.resize(N);
  h.positions.resize(N);
  h.targets.assign(N, -100);
  for (int64_t i = 0; i < N; ++i) h.tokens[i] = static_cast<int32_t>(rng.uniform(1, static_cast<uint32_t>(i)) * (kV - 1));
  const bool packed = c.llama && c.diffusion;
  if (packed) h.segments.resize(N);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t) {
      const int64_t split = 5 + 4 * b;  // the second document starts here
      const bool second = packed && t >= split;
      h.positions[b * kT + t] = static_cast<int32_t>(second ? t - split : t);
      if (packed) h.segments[b * kT + t] = second ? 1 : 0;
    }
  if (!c.diffusion) {
    for (int64_t b = 0; b < kB; ++b)
      for (int64_t t = 0; t + 1 < kT; ++t) h.targets[b * kT + t] = h.tokens[b * kT + t + 1];
  } else {
    h.weights.assign(N, 0.0f);
    constexpr int32_t kMaskId = 3;
    for (int64_t b = 0; b < kB; ++b) {
      const float ratio = 0.35f + 0.3f * static_cast<float>(b);
      for (int64_t t = 0; t < kT; ++t) {
        const int64_t i = b * kT + t;
        if (rng.uniform(2, static_cast<uint32_t>(i)) < ratio) {
          h.targets[i] = h.tokens[i];
          h.tokens[i] = kMaskId;
          h.weights[i] = 1.0f / ratio;
        }
      }
    }
  }
  h.mb.B = kB;
  h.mb.T = kT;
  h.mb.tokens = h.tokens;
  h.mb.positions = h.positions;
  if (packed) h.mb.segment_ids = h.segments;
  h.mb.targets = h.targets;
  if (c.diffusion) h.mb.weights = h.weights;
  return h;
}

std::unique_ptr<LanguageModel> build(const Case& c, Device device, uint64_t seed) {
  // Recomputation changes no value: the CPU reference keeps every activation.
  TransformerConfig cfg = tiny(c.llama);
  with_moe(cfg, c.moe);
  const ModelSpec spec = c.diffusion ? decoder_model_spec(cfg, difflm_layer_spec(cfg, MaskType::None, 0))
                                     : gpt_model_spec(cfg);
  auto m = std::make_unique<LanguageModel>(cfg, spec, ParallelContext::single(), true, true, device);
  m->params().init(seed);
  if (c.bf16 || c.recipe != Recipe::None) {
    PrecisionConfig p;
    p.mode = PrecisionMode::BF16;
    p.bf16_products = c.bf16;
    if (c.recipe == Recipe::Fp16) p.mode = PrecisionMode::FP16;
    if (c.recipe == Recipe::Fp8E4m3 || c.recipe == Recipe::Fp8Hybrid) {
      p.mode = PrecisionMode::FP8;
      p.fp8.format = c.recipe == Recipe::Fp8E4m3 ? Fp8Format::E4M3 : Fp8Format::Hybrid;
      p.fp8.amax_history_len = 4;
      p.fp8.amax_algo = Fp8AmaxAlgo::Max;
    }
    m->set_precision(p);
  }
  if (c.recompute && device != Device::CPU) {
    RecomputeConfig r;
    r.granularity = RecomputeGranularity::Full;
    r.num_layers = 1;
    m->set_recompute(r);
  }
  return m;
}

std::vector<float> host_values(const ParamStore& ps) {
  std::vector<float> v(static_cast<size_t>(ps.numel()));
  ps.copy_values_to_host(v.data());
  return v;
}
std::vector<float> host_grads(const ParamStore& ps) {
  std::vector<float> v(static_cast<size_t>(ps.numel()));
  ps.copy_grads_to_host(v.data());
  return v;
}

// max |a - b| over one parameter, relative to the largest |b| of that parameter (its scale).
// Max difference over the parameter's gradient, relative to its largest element, but to no less than
// `floor`: the key bias's exact gradient is zero (softmax ignores a per-query constant), so what either
// device gives there is rounding noise of the size of its neighbours' rounding, not a scale.
double param_error(const std::vector<float>& a, const std::vector<float>& b, const ParamInfo& p, double floor) {
  double err = 0, scale = 0;
  for (int64_t i = p.offset; i < p.offset + p.shape.numel(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return err / std::max({scale, floor, 1e-12});
}

void compare_forward_backward(const Case& c) {
  const uint64_t seed = 4242 + (c.llama ? 1 : 0) + (c.diffusion ? 2 : 0) + 4 * c.moe;
  auto cpu_model = build(c, Device::CPU, seed);
  auto gpu_model = build(c, Device::CUDA, seed);
  ASSERT_EQ(gpu_model->params().device(), Device::CUDA);
  // The same seed gives bit-identical parameters on both devices (drawn on the host, uploaded).
  const std::vector<float> v_cpu = host_values(cpu_model->params()), v_gpu = host_values(gpu_model->params());
  ASSERT_EQ(v_cpu.size(), v_gpu.size());
  ASSERT_TRUE(std::equal(v_cpu.begin(), v_cpu.end(), v_gpu.begin())) << "initial parameters differ";

  HostBatch batch = make_batch(c, seed);
  const int64_t N = kB * kT;
  const float grad_scale = 1.0f / static_cast<float>(N);
  std::vector<float> tok_cpu(N, NAN), tok_gpu(N, NAN);
  const double loss_cpu = cpu_model->forward_backward(batch.mb, grad_scale, tok_cpu.data());
  const double loss_gpu = gpu_model->forward_backward(batch.mb, grad_scale, tok_gpu.data());
  backend_for(Device::CUDA).synchronize();
  ASSERT_EQ(gpu_model->arena().device(), Device::CUDA);

  // fp32: the products differ only in summation order (cuBLASLt vs oneDNN, exact fp32 on both);
  // bf16: the same roundings of inputs, different accumulation orders and rounding points.
  const double tol = c.low_precision() ? 3e-2 : 2e-4;
  ASSERT_TRUE(std::isfinite(loss_gpu));
  EXPECT_NEAR(loss_gpu, loss_cpu, tol * std::abs(loss_cpu)) << "loss";
  for (int64_t i = 0; i < N; ++i)
    EXPECT_NEAR(tok_gpu[i], tok_cpu[i], tol * (1.0 + std::abs(tok_cpu[i]))) << "per-token loss " << i;
  const std::vector<float> g_cpu = host_grads(cpu_model->params()), g_gpu = host_grads(gpu_model->params());
  // The floor: a share of the largest gradient element of the model. Where the exact gradient is zero (the
  // key bias) both devices hold rounding noise of their own summation orders, which need not agree even
  // in size, so it is compared against the model's gradient scale: 1% in fp32. Under --bf16 the
  // CPU's attention rounds dS to bf16 (kernels/cpu/attention_bf16.h) and the device's runs in fp32, so
  // there the noise is bf16's, a few tenths of a percent of the largest element: floor 5%.
  double g_max = 0;
  for (float g : g_cpu) g_max = std::max(g_max, static_cast<double>(std::abs(g)));
  int checked = 0;
  for (const ParamInfo& p : cpu_model->params().infos()) {
    const double e = param_error(g_gpu, g_cpu, p, (c.low_precision() ? 5e-2 : 1e-2) * g_max);
    EXPECT_LT(e, c.low_precision() ? 6e-2 : 5e-4) << "gradient of " << p.name;
    ++checked;
  }
  EXPECT_EQ(checked, gpu_model->params().count());
  // The routers chose alike: the same tokens per expert, drops and (to rounding) aux and z losses.
  const std::vector<MoELayer*> moe_cpu = cpu_model->moe_layers(), moe_gpu = gpu_model->moe_layers();
  ASSERT_EQ(moe_cpu.size(), moe_gpu.size());
  EXPECT_EQ(moe_cpu.empty(), c.moe == 0);
  for (size_t l = 0; l < moe_cpu.size(); ++l) {
    const MoEStats &a = moe_cpu[l]->stats(), &b = moe_gpu[l]->stats();
    EXPECT_EQ(b.tokens_per_expert, a.tokens_per_expert) << moe_cpu[l]->name();
    EXPECT_EQ(b.dropped, a.dropped) << moe_cpu[l]->name();
    if (c.moe == 2) {
      EXPECT_GT(a.dropped, 0.0) << "a capacity of one is meant to drop tokens";
    }
    EXPECT_NEAR(b.aux_loss, a.aux_loss, tol * a.aux_loss) << moe_cpu[l]->name();
    EXPECT_NEAR(b.z_loss, a.z_loss, tol * a.z_loss) << moe_cpu[l]->name();
  }
}


// One clipped AdamW step on each device from the same gradients: the same norm and parameters.
void adamw_step_matches_the_cpu() {
  const Case c{true, true, false};
  auto cpu_model = build(c, Device::CPU, 77);
  auto gpu_model = build(c, Device::CUDA, 77);
  HostBatch batch = make_batch(c, 77);
  cpu_model->forward_backward(batch.mb, 1.0f / (kB * kT));
  gpu_model->forward_backward(batch.mb, 1.0f / (kB * kT));
  // The device's own gradients differ from the CPU's in summation order, and AdamW turns that into an update
  // of up to lr where a gradient is near zero (m / sqrt(v) is then its sign): so, after checking the norms
  // agree, the device steps from the CPU's gradients, and only the update itself is compared.
  const std::vector<float> g_own = host_grads(gpu_model->params()), g_cpu = host_grads(cpu_model->params());
  const double n_own = std::sqrt(std::inner_product(g_own.begin(), g_own.end(), g_own.begin(), 0.0));
  copy_bytes(gpu_model->params().grads(), Device::CUDA, g_cpu.data(), Device::CPU, g_cpu.size() * sizeof(float));
  AdamWConfig cfg;
  cfg.clip_grad = 0.05f;  // small, so that clipping is exercised
  cfg.weight_decay = 0.1f;
  AdamW opt_cpu(cpu_model->params(), cfg), opt_gpu(gpu_model->params(), cfg);
  EXPECT_EQ(opt_gpu.exp_avg().device(), Device::CUDA);
  const double n_cpu = opt_cpu.grad_norm(), n_gpu = opt_gpu.grad_norm();
  EXPECT_NEAR(n_own, n_cpu, 2e-4 * n_cpu);
  EXPECT_NEAR(n_gpu, n_cpu, 1e-6 * n_cpu);  // the same gradients: only the reduction order differs
  ASSERT_GT(n_cpu, cfg.clip_grad);
  for (int step = 0; step < 2; ++step) {
    opt_cpu.apply(1e-2, n_cpu);
    opt_gpu.apply(1e-2, n_cpu);  // the same norm, so only the update itself is compared
  }
  const std::vector<float> a = host_values(cpu_model->params()), b = host_values(gpu_model->params());
  for (const ParamInfo& p : cpu_model->params().infos()) EXPECT_LT(param_error(b, a, p, 0.0), 1e-5) << p.name;
}

// The arena and the weight copies stay on the device; a second step reuses them (no regrowth).
void repeated_steps_are_bitwise_equal() {
  const Case c{true, true, true};
  auto m = build(c, Device::CUDA, 5);
  HostBatch batch = make_batch(c, 5);
  const double first = m->forward_backward(batch.mb, 1.0f);
  const std::vector<float> g1 = host_grads(m->params());
  m->params().zero_grads();
  const double second = m->forward_backward(batch.mb, 1.0f);
  const std::vector<float> g2 = host_grads(m->params());
  EXPECT_EQ(first, second);
  EXPECT_TRUE(std::equal(g1.begin(), g1.end(), g2.begin())) << "the CUDA kernels are meant to be deterministic";
  EXPECT_EQ(m->arena().device(), Device::CUDA);
}

// pretrain_difflm's flags (with argv[0]) of the robustness tests' tiny diffusion run.
std::vector<std::string> tiny_flags(const std::string& data) {
  return test::plus({"pretrain_difflm"}, test::tiny_difflm_flags(data));
}

// --device cuda end to end: a few steps follow the CPU run's losses; a checkpoint written from the GPU
// and loaded back resumes to the same next two steps as an uninterrupted GPU run (the second reads the
// loaded AdamW moments through the first's update).
void trainer_follows_the_cpu_and_resumes() {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const auto flags = tiny_flags(data);
  test::run_training(flags, {"--train-iters", "4", "--save", tmp / "cpu"});
  test::run_training(flags, {"--train-iters", "4", "--save", tmp / "gpu", "--device", "cuda"});
  // Stopped after iteration 2 (--exit-interval saves and exits), so the schedule and data order are the
  // uninterrupted run's.
  test::run_training(flags, {"--train-iters", "4", "--exit-interval", "2", "--save", tmp / "half", "--device", "cuda"});
  test::run_training(flags, {"--train-iters", "4", "--save", tmp / "half", "--load", tmp / "half", "--device", "cuda"});
  const auto cpu = test::training_lines(tmp / "cpu/metrics.jsonl");
  const auto gpu = test::training_lines(tmp / "gpu/metrics.jsonl");
  const auto resumed = test::training_lines(tmp / "half/metrics.jsonl");
  ASSERT_EQ(cpu.size(), 4u);
  ASSERT_EQ(gpu.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const double a = cpu[i]["loss"].get<double>(), b = gpu[i]["loss"].get<double>();
    EXPECT_NEAR(b, a, 1e-3 * std::abs(a)) << "iteration " << i + 1;
    EXPECT_NEAR(gpu[i]["grad_norm"].get<double>(), cpu[i]["grad_norm"].get<double>(),
                1e-3 * cpu[i]["grad_norm"].get<double>())
        << "iteration " << i + 1;
  }
  ASSERT_EQ(resumed.size(), 4u);  // 2 lines of the first run, then the resumed iterations 3 and 4
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(resumed[i]["iteration"].get<int64_t>(), static_cast<int64_t>(i + 1));
    EXPECT_EQ(resumed[i]["loss"].get<double>(), gpu[i]["loss"].get<double>()) << "resumed iteration " << i + 1 << " differs";
  }
}

// Three steps of `flags` (which hold --train-iters 3) on the CPU and with --device cuda, saved under
// tmp/cpu and tmp/gpu: their metrics lines, three each.
void run_on_both(const std::vector<std::string>& flags, const test::TempDir& tmp, std::vector<nlohmann::json>& cpu,
                 std::vector<nlohmann::json>& gpu) {
  test::run_training(flags, {"--save", tmp / "cpu"});
  test::run_training(flags, {"--save", tmp / "gpu", "--device", "cuda"});
  cpu = test::training_lines(tmp / "cpu/metrics.jsonl");
  gpu = test::training_lines(tmp / "gpu/metrics.jsonl");
  ASSERT_EQ(cpu.size(), 3u);
  ASSERT_EQ(gpu.size(), 3u);
}

// Three --device cuda steps with `extra` flags follow the CPU run's values of `keys` (1e-3; counts
// exactly). The CPU run's metrics lines go to *cpu_lines when given.
void trainer_follows_the_cpu_with(const std::vector<std::string>& extra, const std::vector<std::string>& keys,
                                  std::vector<nlohmann::json>* cpu_lines = nullptr) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const auto flags = test::plus(test::plus(tiny_flags(data), extra), {"--train-iters", "3"});
  std::vector<nlohmann::json> cpu, gpu;
  ASSERT_NO_FATAL_FAILURE(run_on_both(flags, tmp, cpu, gpu));
  for (size_t i = 0; i < 3; ++i)
    for (const std::string& key : keys) {
      if (key == "overflow_skips") {  // counted, so exact
        EXPECT_EQ(gpu[i][key].get<int64_t>(), cpu[i][key].get<int64_t>()) << key << " at iteration " << i + 1;
        continue;
      }
      ASSERT_TRUE(cpu[i].contains(key)) << key;
      const double a = cpu[i][key].get<double>(), b = gpu[i][key].get<double>();
      EXPECT_NEAR(b, a, 1e-3 * std::abs(a)) << key << " at iteration " << i + 1;
    }
  if (cpu_lines) *cpu_lines = cpu;
}

// --num-experts: the MoE trainer (aux and z losses, per-layer statistics) and its logged MoE losses.
void moe_trainer_follows_the_cpu() {
  trainer_follows_the_cpu_with({"--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "24",
                                "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3"},
                               {"loss", "grad_norm", "moe_aux_loss", "moe_z_loss"});
}

// --fp16: dynamic loss scaling (the overflow check and the unscaling on the device); --fp8-format: the
// delayed scaling's amax history over the steps.
void fp16_trainer_follows_the_cpu() {
  trainer_follows_the_cpu_with({"--fp16", "--initial-loss-scale", "1024", "--loss-scale-window", "2"},
                               {"loss", "grad_norm", "loss_scale", "overflow_skips"});
  // A scale so large that the fp16 gradients overflow: the device finds it, skips, and backs off alike.
  std::vector<nlohmann::json> cpu;
  trainer_follows_the_cpu_with({"--fp16", "--initial-loss-scale", "1073741824", "--hysteresis", "1"},
                               {"loss", "loss_scale", "overflow_skips"}, &cpu);
  ASSERT_FALSE(cpu.empty());
  EXPECT_GT(cpu.back()["overflow_skips"].get<int64_t>(), 0) << "the scale was meant to overflow";
}
void fp8_trainer_follows_the_cpu() {
  trainer_follows_the_cpu_with({"--fp8-format", "hybrid", "--fp8-amax-history-len", "2"}, {"loss", "grad_norm"});
}

// --load-hf with --device cuda: a HuggingFace checkpoint (Qwen3 layout, adapted to diffusion: its
// vocabulary of 96 already holds the mask token) is loaded on the host and uploaded; the first loss is
// the CPU run's (the same values, before any update) and the next steps follow it.
void load_hf_follows_the_cpu() {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string hf = std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/hf_qwen3";
  const std::vector<std::string> flags = {
      "pretrain_difflm", "--load-hf", hf, "--model-type", "difflm", "--seq-length", "16", "--micro-batch-size", "2",
      "--global-batch-size", "4", "--data-path", data, "--tokenizer-type", "NullTokenizer", "--vocab-size", "64",
      "--mask-token", "62", "--lr", "3e-3", "--lr-warmup-iters", "1", "--log-interval", "1", "--eval-interval",
      "1000", "--eval-iters", "1", "--seed", "5", "--data-cache-path", data + "_cache", "--train-iters", "3"};
  std::vector<nlohmann::json> cpu, gpu;
  ASSERT_NO_FATAL_FAILURE(run_on_both(flags, tmp, cpu, gpu));
  for (size_t i = 0; i < 3; ++i) {
    const double a = cpu[i]["loss"].get<double>(), b = gpu[i]["loss"].get<double>();
    EXPECT_NEAR(b, a, (i == 0 ? 1e-5 : 1e-3) * std::abs(a)) << "iteration " << i + 1;
  }
  // And the loaded values are the checkpoint's, not a fresh initialisation: a run from the same seed
  // without --load-hf starts elsewhere.
  std::vector<std::string> fresh = {"pretrain_difflm", "--model-type", "difflm", "--num-layers", "2",
                                    "--hidden-size", "32", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
                                    "--kv-channels", "16", "--ffn-hidden-size", "64", "--swiglu",
                                    "--normalization", "RMSNorm", "--position-embedding-type", "rope",
                                    "--qk-layernorm", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
                                    "--make-vocab-size-divisible-by", "96"};
  for (size_t i = 5; i < flags.size(); ++i) fresh.push_back(flags[i]);  // the data and schedule flags
  test::run_training(fresh, {"--save", tmp / "fresh", "--device", "cuda"});
  const auto init = test::training_lines(tmp / "fresh/metrics.jsonl");
  ASSERT_EQ(init.size(), 3u);
  EXPECT_GT(std::abs(init[0]["loss"].get<double>() - gpu[0]["loss"].get<double>()), 1e-3);
}

// Inference on the device (generate / evaluate --device cuda): the full forward's logits, a KV-cached
// prefill and one-token decodes against the CPU's (the cache, the new rows' copies into it and the decode
// attention on the device); greedy decoding with and without the cache gives the CPU's tokens, batched
// prompts of different lengths included; the log-likelihood agrees.
void kv_cache_inference_matches_the_cpu(bool llama) {
  const Case c{llama, false, false};
  auto cpu_model = build(c, Device::CPU, 61);
  auto gpu_model = build(c, Device::CUDA, 61);
  const std::vector<int32_t> seq = {3, 9, 1, 14, 0, 22, 7, 7, 12, 2, 19, 40, 66, 5};
  const int64_t T = static_cast<int64_t>(seq.size());
  std::vector<int32_t> pos(seq.size());
  std::iota(pos.begin(), pos.end(), 0);
  auto logits = [&](LanguageModel& m, KVCache* cache, int64_t from, int64_t to) {
    MicroBatch mb;
    mb.B = 1;
    mb.T = to - from;
    mb.tokens.assign(seq.begin() + from, seq.begin() + to);
    mb.positions.assign(pos.begin() + from, pos.begin() + to);
    const Tensor lg = cache ? m.forward_logits_cached(mb, *cache, 0, &from, true, false) : m.forward_logits(mb);
    EXPECT_EQ(lg.device(), Device::CPU) << "the logits come back to the host";
    std::vector<float> out(lg.data<float>(), lg.data<float>() + lg.numel());
    m.arena().reset();
    return out;
  };
  auto expect_close = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(b[i])));
    EXPECT_LT(worst, 1e-4) << what;
  };
  expect_close(logits(*gpu_model, nullptr, 0, T), logits(*cpu_model, nullptr, 0, T), "full forward");
  KVCache cc, gc;
  cpu_model->allocate_cache(cc, 1, T);
  gpu_model->allocate_cache(gc, 1, T);
  ASSERT_EQ(gc.device, Device::CUDA);
  expect_close(logits(*gpu_model, &gc, 0, 5), logits(*cpu_model, &cc, 0, 5), "prefill");
  for (int64_t t = 5; t < T; ++t) expect_close(logits(*gpu_model, &gc, t, t + 1), logits(*cpu_model, &cc, t, t + 1), "decode");
  const std::vector<std::vector<int32_t>> prompts = {{4, 11, 7}, {1}, {20, 3, 3, 8, 15, 2, 9}};
  ARSampleOptions o;
  o.max_new_tokens = 10;
  const auto want = ar_generate_batch(*cpu_model, prompts, o);
  EXPECT_EQ(ar_generate_batch(*gpu_model, prompts, o), want) << "greedy, KV cache";
  o.kv_cache = false;
  EXPECT_EQ(ar_generate_batch(*gpu_model, prompts, o), want) << "greedy, no cache";
  const double ll_cpu = ar_log_likelihood(*cpu_model, seq, 1), ll_gpu = ar_log_likelihood(*gpu_model, seq, 1);
  EXPECT_NEAR(ll_gpu, ll_cpu, 1e-4 * std::abs(ll_cpu));
}

// The diffusion samplers on the device: LLaDA's reverse process in blocks, with and without the
// prefix cache, give the CPU's tokens (greedy); the Monte Carlo NLL estimate agrees.
void diffusion_inference_matches_the_cpu() {
  const Case c{true, true, false};
  auto cpu_model = build(c, Device::CPU, 71);
  auto gpu_model = build(c, Device::CUDA, 71);
  const std::vector<std::vector<int32_t>> prompts = {{4, 11, 7, 30}, {1, 2, 60, 9}};
  DiffusionSampleOptions o;
  o.gen_length = 12;
  o.steps = 6;
  o.block_length = 4;
  o.mask_token = 3;
  for (const bool prefix_cache : {false, true}) {
    o.prefix_cache = prefix_cache;
    EXPECT_EQ(diffusion_generate_batch(*gpu_model, prompts, o), diffusion_generate_batch(*cpu_model, prompts, o))
        << "prefix cache " << prefix_cache;
  }
  DiffusionLikelihoodOptions l;
  l.mask_token = 3;
  l.mc_samples = 8;
  const std::vector<int32_t> seq = {4, 11, 7, 30, 1, 2, 60, 9, 14, 15};
  const MCEstimate a = diffusion_nll(*cpu_model, seq, 4, l, 0), b = diffusion_nll(*gpu_model, seq, 4, l, 0);
  EXPECT_NEAR(b.mean, a.mean, 1e-4 * std::abs(a.mean));
}

// generate / evaluate's loader: a checkpoint loaded onto the device holds the host load's values and
// gives its logits.
void load_model_onto_the_device() {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 40);
  test::run_training(tiny_flags(data), {"--train-iters", "2", "--save", tmp / "run"});
  LoadedModel host = load_model(tmp / "run"), dev = load_model(tmp / "run", Device::CUDA);
  ASSERT_EQ(dev.model->device(), Device::CUDA);
  EXPECT_EQ(host_values(dev.model->params()), host_values(host.model->params()));
  const std::vector<int32_t> seq = {5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<float> a = test::sequence_logits(*host.model, seq), b = test::sequence_logits(*dev.model, seq);
  ASSERT_EQ(a.size(), b.size());
  // The padded vocabulary rows' logits are -inf on both (nn/lm_head.h).
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i])) ASSERT_EQ(b[i], a[i]) << i;
    else ASSERT_NEAR(b[i], a[i], 1e-4 * (1 + std::abs(a[i]))) << i;
  }
}

// Each check twice: on the GPU (skipped without one), and on the emulated device (skipped with a GPU).
#define SKIP_WITH_GPU() \
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: the CudaModel / CudaTrainer tests run on it instead"
#define BOTH_DEVICES(name, ...)                 \
  TEST(CudaModel, name) {                       \
    SKIP_WITHOUT_GPU();                         \
    __VA_ARGS__;                                \
  }                                             \
  TEST(EmulatedCudaModel, name) {               \
    SKIP_WITH_GPU();                            \
    test::EmulatedCudaScope emulated;           \
    const int64_t before = test::emulated_pointer_checks(); \
    __VA_ARGS__;                                \
    EXPECT_GT(test::emulated_pointer_checks(), before) << "the emulated device was not used"; \
  }

BOTH_DEVICES(Gpt2AutoregressiveFp32, compare_forward_backward({false, false, false}))
BOTH_DEVICES(Gpt2DiffusionFp32, compare_forward_backward({false, true, false}))
BOTH_DEVICES(LlamaAutoregressiveFp32, compare_forward_backward({true, false, false}))
BOTH_DEVICES(LlamaDiffusionPackedDocumentsFp32, compare_forward_backward({true, true, false}))
BOTH_DEVICES(Gpt2AutoregressiveBf16, compare_forward_backward({false, false, true}))
BOTH_DEVICES(LlamaDiffusionBf16, compare_forward_backward({true, true, true}))
BOTH_DEVICES(LlamaDiffusionBf16FullRecompute, compare_forward_backward({true, true, true, true}))
BOTH_DEVICES(Gpt2AutoregressiveFp32FullRecompute, compare_forward_backward({false, false, false, true}))
// MoE layers: the router's gemm and top-k, the permutation to expert-major rows, the experts' gemms,
// the weighted combine and their backward (router weights included) on the device.
BOTH_DEVICES(Gpt2AutoregressiveMoEFp32, compare_forward_backward({false, false, false, false, 1}))
BOTH_DEVICES(LlamaDiffusionMoESharedExpertCapacityFp32, compare_forward_backward({true, true, false, false, 2}))
BOTH_DEVICES(LlamaDiffusionMoEBf16, compare_forward_backward({true, true, true, false, 1}))
// The emulated recipes: rounding to fp16, fp8 quantisation with delayed scaling (amax on the device,
// downloaded), bf16 storage with fp32 products.
BOTH_DEVICES(Gpt2AutoregressiveFp16, compare_forward_backward({false, false, false, false, 0, Recipe::Fp16}))
BOTH_DEVICES(LlamaDiffusionFp8Hybrid, compare_forward_backward({true, true, false, false, 0, Recipe::Fp8Hybrid}))
BOTH_DEVICES(Gpt2DiffusionFp8E4m3, compare_forward_backward({false, true, false, false, 0, Recipe::Fp8E4m3}))
BOTH_DEVICES(LlamaAutoregressiveBf16StorageOnly,
             compare_forward_backward({true, false, false, false, 0, Recipe::Bf16StorageOnly}))
BOTH_DEVICES(LlamaDiffusionFp16FullRecompute, compare_forward_backward({true, true, false, true, 0, Recipe::Fp16}))
BOTH_DEVICES(Gpt2KvCacheInferenceMatchesTheCpu, kv_cache_inference_matches_the_cpu(false))
BOTH_DEVICES(LlamaKvCacheInferenceMatchesTheCpu, kv_cache_inference_matches_the_cpu(true))
BOTH_DEVICES(DiffusionInferenceMatchesTheCpu, diffusion_inference_matches_the_cpu())
BOTH_DEVICES(LoadModelOntoTheDevice, load_model_onto_the_device())
BOTH_DEVICES(AdamWStepMatchesTheCpu, adamw_step_matches_the_cpu())
BOTH_DEVICES(RepeatedStepsAreBitwiseEqual, repeated_steps_are_bitwise_equal())
BOTH_DEVICES(TrainerFollowsTheCpuAndResumes, trainer_follows_the_cpu_and_resumes())
BOTH_DEVICES(MoETrainerFollowsTheCpu, moe_trainer_follows_the_cpu())
BOTH_DEVICES(Fp16TrainerFollowsTheCpu, fp16_trainer_follows_the_cpu())
BOTH_DEVICES(Fp8TrainerFollowsTheCpu, fp8_trainer_follows_the_cpu())
BOTH_DEVICES(LoadHfFollowsTheCpu, load_hf_follows_the_cpu())

// On a device with fp8 products (the emulated one says it has them) the fp8 recipe's Linear layers
// multiply fp8 codes through Backend::gemm_fp8, and still give the CPU's emulated result (the case above).
TEST(EmulatedCudaModel, Fp8RecipeMultipliesFp8Codes) {
  SKIP_WITH_GPU();
  test::EmulatedCudaScope emulated;
  const int64_t before = test::emulated_fp8_products();
  compare_forward_backward({true, true, false, false, 0, Recipe::Fp8Hybrid});
  EXPECT_GT(test::emulated_fp8_products(), before) << "the fp8 recipe did not reach Backend::gemm_fp8";
}

// The emulation itself: a device op given a host array throws, host code reading device memory faults.
TEST(EmulatedCudaModel, HostAccessToDeviceMemoryIsCaught) {
  SKIP_WITH_GPU();
  {
    test::EmulatedCudaScope emulated;
    Tensor d = Tensor::zeros({8}, DType::F32, Device::CUDA);
    std::vector<float> host(8, 1.0f);
    const std::string err = test::error_of([&] { backend_for(Device::CUDA).add_inplace(d.data<float>(), host.data(), 8); });
    EXPECT_NE(err.find("add_inplace was given a pointer outside device memory"), std::string::npos) << err;
    Tensor h = Tensor::empty({8}, DType::F32);
    h.copy_from(d);  // a download goes through the memory table: allowed
    EXPECT_EQ(h.data<float>()[3], 0.0f);
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        test::EmulatedCudaScope emulated;
        Tensor d = Tensor::zeros({8}, DType::F32, Device::CUDA);
        volatile float x = d.data<float>()[0];  // host code reading device memory
        (void)x;
      },
      "host code reading or writing device memory");
}

// On a device the output layer of a diffusion batch runs on the masked rows only, as on the CPU: the
// rows it gathers are exactly those with a loss.
TEST(EmulatedCudaModel, DiffusionHeadRunsOnTheRowsWithALoss) {
  SKIP_WITH_GPU();
  test::EmulatedCudaScope emulated;
  const Case c{false, true, false};
  auto m = build(c, Device::CUDA, 9);
  HostBatch batch = make_batch(c, 9);
  int64_t with_loss = 0;
  for (int32_t t : batch.targets) with_loss += t != -100;
  ASSERT_GT(with_loss, 0);
  ASSERT_LT(with_loss, kB * kT);
  const int64_t before = test::emulated_gathered_rows();
  m->forward_backward(batch.mb, 1.0f);
  EXPECT_EQ(test::emulated_gathered_rows() - before, with_loss);
}

// Runs everywhere: where CUDA cannot be used, --device cuda says so, naming the flag.
TEST(CudaTrainer, DeviceCudaWithoutAGpuNamesTheFlag) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: the error path does not apply";
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 20);
  const std::string err = test::error_of(
      [&] { test::run_training(tiny_flags(data), {"--train-iters", "1", "--device", "cuda"}); });
  EXPECT_NE(err.find("--device cuda"), std::string::npos) << err;
  EXPECT_NE(err.find(cuda_compiled() ? "no GPU" : "no CUDA backend"), std::string::npos) << err;
  // And an unknown device is refused by the parser's own check.
  const std::string bad = test::error_of(
      [&] { test::run_training(tiny_flags(data), {"--train-iters", "1", "--device", "tpu"}); });
  EXPECT_NE(bad.find("--device"), std::string::npos) << bad;
}

// The model refuses what stage 1 does not run on a device (here: without a GPU, the backend's error).
TEST(CudaModel, ModelOnCudaWithoutAGpuThrows) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible";
  const TransformerConfig cfg = tiny(false);
  const std::string err = test::error_of(
      [&] { LanguageModel m(cfg, gpt_model_spec(cfg), ParallelContext::single(), true, true, Device::CUDA); });
  EXPECT_NE(err.find(cuda_compiled() ? "no GPU is visible" : "no CUDA backend"), std::string::npos) << err;
}

}  // namespace
