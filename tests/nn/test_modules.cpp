// Gradient checks of every nn module and of the whole LanguageModel by central finite differences.
//
// Each module is seen as a scalar function of its parameters (perturbed through the ParamStore values)
// and of its float input: L = sum(out * R) with a fixed random R, accumulated in double from the fp32
// outputs (the LM head and the model use their own loss). The analytic gradients come from one
// forward + backward with dL/dout = R. Differences use h = 1e-2 in fp32, so the comparison is loose:
// the error is measured relative to the largest |gradient| of each tensor (floored at 1e-2 of the
// module's largest gradient, for tensors whose gradient is zero in exact arithmetic) and must stay
// under 2e-2. The observed errors stay below 3e-3; scaling every analytic gradient by 1.1 (or even
// 1.03) makes every check of a nonzero gradient fail, so the tolerance bites.
// Large tensors are checked on a deterministic sample of elements to keep the suite fast.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "kernels/cpu/cast.h"
#include "models/language_model.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/lm_head.h"
#include "nn/mlp.h"
#include "nn/norm.h"
#include "core/parameters.h"
#include "nn/transformer_layer.h"
#include "grad_check.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;
using namespace megadlm::test::grad_check;

namespace {

const ParallelContext kSingle = ParallelContext::single();

// The init of the projections that write into the residual stream, as a stack of cfg.num_layers sets it.
float output_std(const TransformerConfig& c) {
  return c.init_method_std / std::sqrt(2.0f * static_cast<float>(c.num_layers));
}

// The --bf16 policy (bf16 products), for the tests that run a module with and without it.
PrecisionConfig bf16_products() {
  PrecisionConfig pc;
  pc.mode = PrecisionMode::BF16;
  return pc;
}

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 24;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.kv_channels = 6;
  c.ffn_hidden_size = 40;
  c.vocab_size = 37;
  c.max_position_embeddings = 16;
  return c;
}

TransformerConfig gpt2_style() {
  TransformerConfig c = tiny_config();
  c.normalization = NormKind::LayerNorm;
  c.activation = Activation::Gelu;
  c.add_bias_linear = true;
  c.position_embedding = PositionEmbedding::LearnedAbsolute;
  c.untie_embeddings_and_output_weights = false;
  c.attention_mask = MaskType::Causal;
  return c;
}

TransformerConfig llama_style() {
  TransformerConfig c = tiny_config();
  c.normalization = NormKind::RMSNorm;
  c.norm_epsilon = 1e-6f;
  c.activation = Activation::SwiGLU;
  c.add_bias_linear = false;
  c.position_embedding = PositionEmbedding::Rope;
  c.qk_layernorm = true;
  c.untie_embeddings_and_output_weights = true;
  return c;
}

constexpr int64_t kB = 2, kT = 7;  // odd T on purpose
// Positions do not start at 0 in the second sequence (as after packing), documents of uneven length.
const std::vector<int32_t> kPositions = {0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8, 9, 10};
const std::vector<int32_t> kSegments = {0, 0, 0, 1, 1, 1, 1, 3, 3, 4, 4, 4, 4, 5};

BatchInfo batch_info(bool segments) {
  return BatchInfo{kB, kT, kPositions.data(), segments ? kSegments.data() : nullptr};
}

// ---- Linear ----------------------------------------------------------------------------------------

struct LinearCase {
  bool bias;
  LinearParallel mode;
};

class LinearGrad : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearGrad, FiniteDifferences) {
  const int64_t N = 9, I = 13, O = 11;
  ParamStore store;
  Linear lin(store, kSingle, "lin", I, O, GetParam().bias, 0.02f, GetParam().mode);
  store.finalize();
  randomize(store, 1);
  Arena arena;
  check_gradients("Linear", store, arena, random_vector(N * I, 2), {N, I},
                  sum_times_random(N * O, 3, [&](Arena& a, const Tensor& x) { return lin.forward(a, x); },
                                   [&](Arena&, const Tensor& dy, Tensor& dx) { lin.backward(dy, dx, false); }));
}

INSTANTIATE_TEST_SUITE_P(Modules, LinearGrad,
                         ::testing::Values(LinearCase{true, LinearParallel::Column},
                                           LinearCase{false, LinearParallel::Column},
                                           LinearCase{true, LinearParallel::Row}));

TEST(LinearGrad, AccumulateDxAddsAndParameterGradientsAccumulate) {
  const int64_t N = 9, I = 13, O = 11;
  ParamStore store;
  Linear lin(store, kSingle, "lin", I, O, true, 0.02f);
  store.finalize();
  randomize(store, 4);
  Arena arena;
  Tensor x = Tensor::empty({N, I}, DType::F32);
  const std::vector<float> xv = random_vector(N * I, 5), dyv = random_vector(N * O, 6), d0 = random_vector(N * I, 7);
  std::copy(xv.begin(), xv.end(), x.data<float>());
  lin.forward(arena, x);
  Tensor dy = Tensor::empty({N, O}, DType::F32);
  std::copy(dyv.begin(), dyv.end(), dy.data<float>());

  Tensor dx_written = Tensor::empty({N, I}, DType::F32);
  dx_written.fill_(std::numeric_limits<float>::quiet_NaN());
  store.zero_grads();
  // The step's first weight gradient is written over the zeroed buffer without reading it (beta = 0,
  // ParamStore::claim_unwritten_grad): NaN there must not reach the result.
  store.grad(store.find("lin.weight")).fill_(std::numeric_limits<float>::quiet_NaN());
  lin.backward(dy, dx_written, false);
  const std::vector<float> once(store.grads(), store.grads() + store.numel());
  for (float g : once) ASSERT_FALSE(std::isnan(g));

  Tensor dx_acc = Tensor::empty({N, I}, DType::F32);
  std::copy(d0.begin(), d0.end(), dx_acc.data<float>());
  lin.backward(dy, dx_acc, true);
  for (int64_t i = 0; i < N * I; ++i)
    ASSERT_NEAR(dx_acc.data<float>()[i], d0[i] + dx_written.data<float>()[i], 1e-5f) << "dx[" << i << "]";
  for (int64_t i = 0; i < store.numel(); ++i)
    ASSERT_NEAR(store.grads()[i], 2.0f * once[i], 1e-5f * (1.0f + std::fabs(once[i]))) << "grad[" << i << "]";
}

// backward's before_weight_grad runs after dx is made and before dW's product reads the saved input,
// which it may replace (the MLP remakes fc2's input there; in fp32 the saved input is a view of x, here
// overwritten): dW then comes from the replacement, dx is the same, in fp32 and with bf16 products.
TEST(LinearGrad, BeforeWeightGradRunsBetweenTheProducts) {
  const int64_t N = 9, I = 13, O = 11;
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    ParamStore store;
    Linear lin(store, kSingle, "lin", I, O, false, 0.02f);
    store.finalize();
    randomize(store, 14);
    MixedPrecision prec(store, bf16_products());
    if (bf16) lin.set_precision(&prec);
    const int w = store.find("lin.weight");
    Arena arena;
    const std::vector<float> xv = random_vector(N * I, 15), x2v = random_vector(N * I, 16), dyv = random_vector(N * O, 17);
    Tensor x = arena.tensor({N, I}), x2 = arena.tensor({N, I}), dy = arena.tensor({N, O});
    std::copy(xv.begin(), xv.end(), x.data<float>());
    std::copy(x2v.begin(), x2v.end(), x2.data<float>());
    std::copy(dyv.begin(), dyv.end(), dy.data<float>());
    // The reference: a plain backward after a forward on x2.
    lin.forward(arena, x2);
    Tensor dx_ref = arena.tensor({N, I});
    store.zero_grads();
    lin.backward(dy, dx_ref, false);
    const std::vector<float> dw_ref(store.grad(w).data<float>(), store.grad(w).data<float>() + O * I);
    // The forward on x, its saved input replaced by x2's in the callback.
    Tensor saved2 = arena.tensor({N, I}, DType::BF16);
    cpu::cast_f32_to_bf16(static_cast<uint16_t*>(saved2.raw()), x2.data<float>(), N * I);
    lin.forward(arena, x);
    Tensor dx = arena.tensor({N, I});
    dx.fill_(std::numeric_limits<float>::quiet_NaN());
    store.zero_grads();
    bool dx_made = false;
    lin.backward(dy, dx, false, [&] {
      dx_made = !std::isnan(dx.data<float>()[0]);
      if (bf16) lin.share_saved_input(saved2);
      else std::copy(x2v.begin(), x2v.end(), x.data<float>());
    });
    EXPECT_TRUE(dx_made) << "the callback runs after the dx product";
    for (int64_t i = 0; i < N * I; ++i) ASSERT_EQ(dx.data<float>()[i], dx_ref.data<float>()[i]) << i;
    for (int64_t i = 0; i < O * I; ++i) ASSERT_EQ(store.grad(w).data<float>()[i], dw_ref[i]) << i;
  }
}

// ParamStore hands out the first write of each gradient once after zero_grads (also when the optimizer
// left the gradients zero and zero_grads skips its clear); a gradient marked written is not handed out.
TEST(ParamStoreGrads, FirstWriteIsClaimedOnceAfterZeroGrads) {
  ParamStore store;
  const int a = store.add("a", {3}, Init::Zeros), b = store.add("b", {4}, Init::Zeros);
  store.finalize();
  EXPECT_TRUE(store.claim_unwritten_grad(a));  // finalize leaves the gradients zero
  EXPECT_FALSE(store.claim_unwritten_grad(a));
  store.mark_grad_written(b);
  EXPECT_FALSE(store.claim_unwritten_grad(b));
  store.zero_grads();
  EXPECT_TRUE(store.claim_unwritten_grad(a));
  EXPECT_TRUE(store.claim_unwritten_grad(b));
  store.note_grads_zeroed();
  store.zero_grads();
  EXPECT_TRUE(store.claim_unwritten_grad(b));
  EXPECT_FALSE(store.claim_unwritten_grad(b));
}

// ---- Norm --------------------------------------------------------------------------------------------

struct NormCase {
  NormKind kind;
  bool bias;
};

class NormGrad : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormGrad, FiniteDifferences) {
  const int64_t N = 7, C = 19;
  ParamStore store;
  Norm norm(store, "norm", GetParam().kind, C, 1e-5f, GetParam().bias);
  store.finalize();
  randomize(store, 11);
  EXPECT_EQ(store.find("norm.bias") >= 0, GetParam().kind == NormKind::LayerNorm && GetParam().bias);
  Arena arena;
  // An offset so that LayerNorm's mean subtraction matters.
  std::vector<float> x = random_vector(N * C, 12, -0.5f, 1.5f);
  check_gradients("Norm", store, arena, x, {N, C},
                  sum_times_random(N * C, 13, [&](Arena& a, const Tensor& in) { return norm.forward(a, in); },
                                   [&](Arena&, const Tensor& dy, Tensor& dx) { norm.backward(dy, dx); }));
}

INSTANTIATE_TEST_SUITE_P(Modules, NormGrad,
                         ::testing::Values(NormCase{NormKind::LayerNorm, true}, NormCase{NormKind::LayerNorm, false},
                                           NormCase{NormKind::RMSNorm, false}));

// ---- SelfAttention -----------------------------------------------------------------------------------

struct AttentionCase {
  const char* name;
  MaskType mask;
  int64_t block_size;
  bool segments;
  PositionEmbedding pos;
  bool qk_norm;
  int64_t K;  // kv heads of H = 4: GQA ratio 4 / K
  bool bias;
};

class AttentionGrad : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionGrad, FiniteDifferences) {
  const AttentionCase& p = GetParam();
  TransformerConfig cfg = tiny_config();
  cfg.num_query_groups = p.K;
  cfg.attention_mask = p.mask;
  cfg.attention_block_size = p.block_size;
  cfg.position_embedding = p.pos;
  cfg.qk_layernorm = p.qk_norm;
  cfg.add_bias_linear = p.bias;
  cfg.add_qkv_bias = !p.bias && p.segments;  // Qwen2-style q/k/v biases in some cases
  const int64_t N = kB * kT, C = cfg.hidden_size;
  ParamStore store;
  SelfAttention attn(store, kSingle, "attn", cfg,
                     SelfAttentionSpec{cfg.attention_mask, cfg.attention_block_size, cfg.qk_layernorm}, 0.02f);
  store.finalize();
  randomize(store, 21);
  EXPECT_EQ(store.find("attn.q_norm.weight") >= 0, p.qk_norm);
  const BatchInfo batch = batch_info(p.segments);
  Arena arena;
  check_gradients(std::string("SelfAttention ") + p.name, store, arena, random_vector(N * C, 22), {N, C},
                  sum_times_random(N * C, 23, [&](Arena& a, const Tensor& x) { return attn.forward(a, x, batch); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { attn.backward(a, dy, dx); }));
}

using PE = PositionEmbedding;
INSTANTIATE_TEST_SUITE_P(
    Modules, AttentionGrad,
    ::testing::Values(
        AttentionCase{"causal_rope_mha_bias", MaskType::Causal, 0, false, PE::Rope, false, 4, true},
        AttentionCase{"causal_rope_qknorm_gqa2", MaskType::Causal, 0, false, PE::Rope, true, 2, false},
        AttentionCase{"causal_learned_qknorm_mha", MaskType::Causal, 0, false, PE::LearnedAbsolute, true, 4, true},
        AttentionCase{"causal_segments_rope_gqa2_qkvbias", MaskType::Causal, 0, true, PE::Rope, false, 2, false},
        AttentionCase{"nomask_learned_gqa4", MaskType::None, 0, false, PE::LearnedAbsolute, false, 1, true},
        AttentionCase{"nomask_segments_rope_qknorm_mha", MaskType::None, 0, true, PE::Rope, true, 4, false},
        AttentionCase{"nomask_rope_qknorm_gqa4", MaskType::None, 0, false, PE::Rope, true, 1, false},
        AttentionCase{"blockcausal3_rope_qknorm_gqa2", MaskType::BlockCausal, 3, false, PE::Rope, true, 2, false},
        AttentionCase{"blockcausal2_segments_learned_gqa4", MaskType::BlockCausal, 2, true, PE::LearnedAbsolute,
                      true, 1, true}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) { return std::string(info.param.name); });

// ---- MLP ----------------------------------------------------------------------------------------------

struct MlpCase {
  Activation act;
  bool bias;
};

class MlpGrad : public ::testing::TestWithParam<MlpCase> {};

TEST_P(MlpGrad, FiniteDifferences) {
  TransformerConfig cfg = tiny_config();
  cfg.activation = GetParam().act;
  cfg.add_bias_linear = GetParam().bias;
  const int64_t N = kB * kT, C = cfg.hidden_size;
  ParamStore store;
  MLP mlp(store, kSingle, "mlp", cfg, cfg.activation, cfg.ffn_hidden_size, 0.02f);
  store.finalize();
  randomize(store, 31);
  const int fc1 = store.find("mlp.fc1.weight");
  ASSERT_GE(fc1, 0);
  EXPECT_EQ(store.info(fc1).shape[0], (GetParam().act == Activation::SwiGLU ? 2 : 1) * cfg.ffn_hidden_size);
  Arena arena;
  check_gradients("MLP", store, arena, random_vector(N * C, 32, -1.5f, 1.5f), {N, C},
                  sum_times_random(N * C, 33, [&](Arena& a, const Tensor& x) { return mlp.forward(a, x); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { mlp.backward(a, dy, dx); }));
}

INSTANTIATE_TEST_SUITE_P(Modules, MlpGrad,
                         ::testing::Values(MlpCase{Activation::Gelu, true}, MlpCase{Activation::Gelu, false},
                                           MlpCase{Activation::SwiGLU, false}, MlpCase{Activation::SwiGLU, true}));

// ---- TransformerLayer ----------------------------------------------------------------------------------

TEST(TransformerLayerGrad, Gpt2StyleCausal) {
  const TransformerConfig cfg = gpt2_style();
  const int64_t N = kB * kT, C = cfg.hidden_size;
  ParamStore store;
  TransformerLayer layer(store, kSingle, "layers.0", cfg, gpt_layer_spec(cfg), output_std(cfg));
  store.finalize();
  randomize(store, 41);
  EXPECT_GE(store.find("layers.0.input_layernorm.bias"), 0);
  EXPECT_GE(store.find("layers.0.mlp.fc2.bias"), 0);
  const BatchInfo batch = batch_info(false);
  Arena arena;
  check_gradients("TransformerLayer gpt2", store, arena, random_vector(N * C, 42), {N, C},
                  sum_times_random(N * C, 43, [&](Arena& a, const Tensor& x) { return layer.forward(a, x, batch); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { layer.backward(a, dy, dx); }));
}

TEST(TransformerLayerGrad, LlamaStyleDiffusionWithSegments) {
  const TransformerConfig cfg = llama_style();
  const int64_t N = kB * kT, C = cfg.hidden_size;
  ParamStore store;
  TransformerLayer layer(store, kSingle, "layers.0", cfg, difflm_layer_spec(cfg, MaskType::None, 0), output_std(cfg));
  store.finalize();
  randomize(store, 44);
  EXPECT_GE(store.find("layers.0.self_attn.k_norm.weight"), 0);
  EXPECT_LT(store.find("layers.0.input_layernorm.bias"), 0);
  const BatchInfo batch = batch_info(true);
  Arena arena;
  check_gradients("TransformerLayer llama", store, arena, random_vector(N * C, 45), {N, C},
                  sum_times_random(N * C, 46, [&](Arena& a, const Tensor& x) { return layer.forward(a, x, batch); },
                                   [&](Arena& a, const Tensor& dy, Tensor& dx) { layer.backward(a, dy, dx); }));
}

// ---- Embedding -----------------------------------------------------------------------------------------

TEST(EmbeddingGrad, TokensAndLearnedPositions) {
  const TransformerConfig cfg = gpt2_style();
  const int64_t N = kB * kT, C = cfg.hidden_size;
  ParamStore store;
  Embedding emb(store, kSingle, cfg, decoder_model_spec(cfg, gpt_layer_spec(cfg)).embedding);
  store.finalize();
  randomize(store, 51);
  ASSERT_GE(store.find("embed_positions.weight"), 0);
  // Repeated tokens, so that the backward must accumulate rows.
  const std::vector<int32_t> tokens = {3, 36, 0, 3, 17, 3, 9, 0, 36, 21, 21, 5, 3, 8};
  const BatchInfo batch = batch_info(false);
  Arena arena;
  check_gradients("Embedding", store, arena, {}, {0},
                  sum_times_random(N * C, 52,
                                   [&](Arena& a, const Tensor&) { return emb.forward(a, tokens.data(), batch); },
                                   [&](Arena&, const Tensor& dy, Tensor&) { emb.backward(dy); }),
                  /*max_samples=*/400);
}

TEST(EmbeddingGrad, TokensOnlyWithRope) {
  const TransformerConfig cfg = llama_style();
  const int64_t N = kB * kT, C = cfg.hidden_size;
  ParamStore store;
  Embedding emb(store, kSingle, cfg, decoder_model_spec(cfg, gpt_layer_spec(cfg)).embedding);
  store.finalize();
  randomize(store, 53);
  EXPECT_EQ(store.count(), 1);
  const std::vector<int32_t> tokens = {1, 1, 1, 2, 35, 0, 9, 9, 12, 30, 1, 4, 7, 8};
  const BatchInfo batch = batch_info(false);
  Arena arena;
  check_gradients("Embedding rope", store, arena, {}, {0},
                  sum_times_random(N * C, 54,
                                   [&](Arena& a, const Tensor&) { return emb.forward(a, tokens.data(), batch); },
                                   [&](Arena&, const Tensor& dy, Tensor&) { emb.backward(dy); }),
                  /*max_samples=*/400);
}

// ---- LMHead ----------------------------------------------------------------------------------------------

// Loss = sum_n w_n CE_n, with ignored targets and uneven weights; tied (the weight is another
// module's parameter) and untied.
void check_lm_head(bool tied) {
  const TransformerConfig cfg = tiny_config();
  const int64_t N = kB * kT, C = cfg.hidden_size;
  ParamStore store;
  int tied_id = -1;
  if (tied) tied_id = store.add("embed_tokens.weight", {cfg.vocab_size, C}, Init::Normal, 0.02f);
  LMHead head(store, cfg, tied_id);
  store.finalize();
  randomize(store, 61);
  EXPECT_EQ(store.find("lm_head.weight") >= 0, !tied);
  EXPECT_EQ(store.count(), 1);
  std::vector<int32_t> targets = {5, -100, 0, 36, 12, 12, 7, -100, 30, 2, 2, 19, 33, 1};
  std::vector<float> weights = random_vector(N, 62, 0.2f, 1.5f);
  weights[4] = 0.0f;  // a zero weight: no loss and no gradient, as an ignored target (rows left out of the head)
  Arena arena;
  const RunFn run = [&](Arena& a, const Tensor& x, Tensor* dx) {
    if (dx) return head.loss_and_backward(a, x, targets.data(), weights.data(), 1.0f, *dx, nullptr);
    // Forward only: the same loss from the logits, in double.
    Tensor lg = head.logits(a, x);
    double l = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      if (targets[n] == -100) continue;
      const float* row = lg.data<float>() + n * cfg.vocab_size;
      double m = row[0], s = 0.0;
      for (int64_t v = 1; v < cfg.vocab_size; ++v) m = std::fmax(m, row[v]);
      for (int64_t v = 0; v < cfg.vocab_size; ++v) s += std::exp(row[v] - m);
      l += weights[n] * (m + std::log(s) - row[targets[n]]);
    }
    return l;
  };
  check_gradients(tied ? "LMHead tied" : "LMHead untied", store, arena, random_vector(N * C, 63, -2.0f, 2.0f),
                  {N, C}, run);
}

TEST(LMHeadGrad, Untied) { check_lm_head(false); }
TEST(LMHeadGrad, Tied) { check_lm_head(true); }

// Splitting the rows into chunks of logits changes only the order in which the output weight's gradient
// sums them: loss, dx and dW as with one chunk, in fp32 and with bf16 products.
TEST(LMHeadChunks, ChunkedEqualsWhole) {
  const TransformerConfig cfg = tiny_config();
  const int64_t N = kB * kT, C = cfg.hidden_size;
  for (const bool bf16 : {false, true}) {
    ParamStore store;
    LMHead head(store, cfg, -1);
    store.finalize();
    randomize(store, 71);
    MixedPrecision prec(store, bf16_products());
    if (bf16) head.set_precision(&prec);
    std::vector<int32_t> targets = {5, -100, 0, 36, 12, 12, 7, -100, 30, 2, 2, 19, 33, 1};
    const std::vector<float> weights = random_vector(N, 72, 0.2f, 1.5f);
    const std::vector<float> xv = random_vector(N * C, 73, -2.0f, 2.0f);
    Arena arena;
    auto run = [&](int64_t max_rows, std::vector<float>& dx_out, std::vector<float>& dw_out) {
      head.limit_chunk_rows(max_rows);
      store.zero_grads();
      Tensor x = arena.tensor({N, C});
      std::copy(xv.begin(), xv.end(), x.data<float>());
      Tensor dx = arena.tensor({N, C});
      dx.fill_(std::numeric_limits<float>::quiet_NaN());
      const double loss = head.loss_and_backward(arena, x, targets.data(), weights.data(), 0.5f, dx, nullptr);
      dx_out.assign(dx.data<float>(), dx.data<float>() + N * C);
      const Tensor g = store.grad(0);
      dw_out.assign(g.data<float>(), g.data<float>() + g.numel());
      arena.reset();
      return loss;
    };
    std::vector<float> dx1, dw1, dx3, dw3;
    const double whole = run(0, dx1, dw1);
    const double chunked = run(4, dx3, dw3);  // 12 rows with a loss: chunks of 4
    const char* what = bf16 ? "bf16 products" : "fp32";
    EXPECT_NEAR(chunked, whole, 1e-6 * std::fabs(whole)) << what;
    EXPECT_LT(test::max_rel_error(dx3, test::to_double(dx1)), 1e-6) << what;  // the same products per row
    EXPECT_LT(test::max_rel_error(dw3, test::to_double(dw1)), 1e-5) << what;  // fp32 sums in another order
    double dw_norm = 0;
    for (float g : dw1) dw_norm += std::fabs(g);
    EXPECT_GT(dw_norm, 0.0) << what;
  }
}

// The tied output layer writes its first chunk's weight gradient over the zeros (not read: NaN there
// changes nothing) unless another module wrote that gradient first in the step and marked it (the word
// embedding of a model whose backward reaches it first): then the head adds to what is there. fp32 and
// bf16 products, in chunks of 4 rows.
TEST(LMHeadGrad, TiedWeightGradientIsWrittenFirstOrAddedToWhenMarked) {
  const TransformerConfig cfg = tiny_config();
  const int64_t N = kB * kT, C = cfg.hidden_size;
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 products" : "fp32");
    ParamStore store;
    const int tied = store.add("embed_tokens.weight", {cfg.vocab_size, C}, Init::Normal, 0.02f);
    LMHead head(store, cfg, tied);
    store.finalize();
    randomize(store, 81);
    MixedPrecision prec(store, bf16_products());
    if (bf16) head.set_precision(&prec);
    head.limit_chunk_rows(4);
    const std::vector<int32_t> targets = {5, -100, 0, 36, 12, 12, 7, -100, 30, 2, 2, 19, 33, 1};
    const std::vector<float> xv = random_vector(N * C, 82, -2.0f, 2.0f);
    const int64_t G = cfg.vocab_size * C;
    Arena arena;
    auto backward = [&] {
      Tensor x = arena.tensor({N, C}), dx = arena.tensor({N, C});
      std::copy(xv.begin(), xv.end(), x.data<float>());
      head.loss_and_backward(arena, x, targets.data(), nullptr, 1.0f, dx, nullptr);
      arena.reset();
      return std::vector<float>(store.grad(tied).data<float>(), store.grad(tied).data<float>() + G);
    };
    store.zero_grads();
    const std::vector<float> plain = backward();

    store.zero_grads();
    store.grad(tied).fill_(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(backward(), plain) << "the first write reads nothing";

    store.zero_grads();
    const std::vector<float> before = random_vector(G, 83);
    std::copy(before.begin(), before.end(), store.grad(tied).data<float>());
    store.mark_grad_written(tied);
    const std::vector<float> added = backward();
    for (int64_t i = 0; i < G; ++i)
      ASSERT_NEAR(added[i], before[i] + plain[i], 1e-6f * (1.0f + std::fabs(before[i]) + std::fabs(plain[i]))) << i;
  }
}

// The chunk size: within the 64 MiB budget (and the cap), the rows split evenly, never a short last
// chunk; no rows at all (a diffusion step with nothing masked) gives one empty chunk of a positive size.
// A split below kMinChunkRows takes fewer chunks, each within twice the budget.
TEST(LMHeadChunks, RowsSplitEvenly) {
  const int64_t V = 50304;
  EXPECT_EQ(logits_chunk_rows(2048, V, 2), 512);  // 667 fit: 4 chunks of 512, not 667 x 3 + 47
  EXPECT_EQ(logits_chunk_rows(2048, V, 4), 293);  // 333 fit: 7 chunks, the last 290
  EXPECT_EQ(logits_chunk_rows(1024, V, 4), 342);  // 333 fit: 3 chunks of 342, not 4 of 256
  EXPECT_EQ(logits_chunk_rows(1024, V, 6), 342);  // 222 fit: 3 chunks of 342 (1.5x the budget), not 5 of 205
  EXPECT_EQ(logits_chunk_rows(1000, V, 2), 500);
  EXPECT_EQ(logits_chunk_rows(600, V, 2), 600);  // one chunk
  EXPECT_EQ(logits_chunk_rows(12, 50, 4, 5), 4);  // the cap: 3 chunks of 4, not 5 + 5 + 2
  EXPECT_EQ(logits_chunk_rows(0, V, 2), 1);
  for (int64_t N : {1, 7, 64, 333, 1001, 4096})
    for (int bytes : {2, 4, 6}) {
      const int64_t rows = logits_chunk_rows(N, V, bytes), chunks = (N + rows - 1) / rows;
      const int64_t budget = std::max<int64_t>(64, logits_chunk_bytes() / (bytes * V));
      EXPECT_LE(rows, std::max<int64_t>(1, std::min(N, 2 * budget))) << N << " " << bytes;
      EXPECT_GE(N - (chunks - 1) * rows, rows - chunks + 1) << N << " " << bytes;  // the last is not short
      // Over the budget only to keep kMinChunkRows rows; below them only where more would pass 2x.
      if (rows > budget) {
        EXPECT_LT((N + chunks) / (chunks + 1), kMinChunkRows) << N << " " << bytes;
      }
      if (rows < kMinChunkRows && chunks > 1) {
        EXPECT_GT((N + chunks - 2) / (chunks - 1), 2 * budget) << N << " " << bytes;
      }
    }
}

// ---- LanguageModel -----------------------------------------------------------------------------------------

struct LmBatch {
  std::vector<int32_t> tokens, targets, segments;
  std::vector<float> weights;
  MicroBatch mb(bool with_segments) const {
    MicroBatch m;
    m.B = kB;
    m.T = kT;
    m.tokens = tokens;
    m.positions = kPositions;
    if (with_segments) m.segment_ids = kSegments;
    m.targets = targets;
    m.weights = weights;
    return m;
  }
};

LmBatch lm_batch() {
  LmBatch b;
  b.tokens = {3, 36, 0, 3, 17, 3, 9, 0, 36, 21, 21, 5, 3, 8};
  b.targets = {36, 0, -100, 17, 3, 9, 4, 36, 21, -100, 5, 3, 8, 30};
  b.weights = random_vector(kB * kT, 71, 0.05f, 0.2f);
  return b;
}

void check_language_model(const std::string& what, const TransformerConfig& cfg, const ModelSpec& spec,
                          bool segments) {
  LanguageModel model(cfg, spec, kSingle);
  randomize(model.params(), 72);
  EXPECT_EQ(model.params().find("lm_head.weight") >= 0, cfg.untie_embeddings_and_output_weights);
  EXPECT_EQ(model.params().find("embed_positions.weight") >= 0,
            cfg.position_embedding == PositionEmbedding::LearnedAbsolute);
  const LmBatch batch = lm_batch();
  const MicroBatch mb = batch.mb(segments);
  const RunFn run = [&](Arena&, const Tensor&, Tensor* dx) {
    return dx ? model.forward_backward(mb, 1.0f) : model.forward_loss(mb);
  };
  check_gradients(what, model.params(), model.arena(), {}, {0}, run, /*max_samples=*/40);

  // grad_scale multiplies every gradient; per-token losses add up to the loss.
  model.params().zero_grads();
  const double l1 = model.forward_backward(mb, 1.0f);
  const std::vector<float> g1(model.params().grads(), model.params().grads() + model.params().numel());
  model.params().zero_grads();
  std::vector<float> per_token(kB * kT, std::numeric_limits<float>::quiet_NaN());
  const double l2 = model.forward_backward(mb, 0.25f, per_token.data());
  EXPECT_EQ(l1, l2);
  double sum = 0.0;
  for (int64_t n = 0; n < kB * kT; ++n) {
    if (batch.targets[n] == -100) {
      EXPECT_EQ(per_token[n], 0.0f) << "ignored token " << n;
    }
    sum += per_token[n];
  }
  EXPECT_NEAR(sum, l1, 1e-5 * std::fabs(l1));
  for (int64_t i = 0; i < model.params().numel(); ++i)
    ASSERT_NEAR(model.params().grads()[i], 0.25f * g1[i], 1e-6f + 1e-5f * std::fabs(g1[i])) << "grad[" << i << "]";
}

TEST(LanguageModelGrad, Gpt2StyleTiedLearnedPositions) {
  const TransformerConfig cfg = gpt2_style();
  check_language_model("LanguageModel gpt2", cfg, gpt_model_spec(cfg), false);
}

TEST(LanguageModelGrad, LlamaStyleUntiedRopeGqaQkNorm) {
  const TransformerConfig cfg = llama_style();
  check_language_model("LanguageModel llama", cfg, gpt_model_spec(cfg), false);
}

TEST(LanguageModelGrad, LlamaStyleDiffusionBidirectionalWithSegments) {
  const TransformerConfig cfg = llama_style();
  check_language_model("LanguageModel difflm", cfg, decoder_model_spec(cfg, difflm_layer_spec(cfg, MaskType::None, 0)), true);
}

// ---- parameter initialisation and arena use -------------------------------------------------------------

TEST(ParamStoreInit, ValuesDependOnNameNotRegistrationOrder) {
  struct P {
    const char* name;
    Shape shape;
    Init init;
    float std;
  };
  const std::vector<P> ps = {{"a.weight", {5, 7}, Init::Normal, 0.1f},
                             {"a.bias", {5}, Init::Zeros, 0.0f},
                             {"n.weight", {9}, Init::Ones, 0.0f},
                             {"b.weight", {33}, Init::Normal, 0.5f}};
  ParamStore fwd, rev;
  for (const P& p : ps) fwd.add(p.name, p.shape, p.init, p.std);
  rev.add("extra.weight", {3, 3}, Init::Normal, 1.0f);  // shifts every offset
  for (auto it = ps.rbegin(); it != ps.rend(); ++it) rev.add(it->name, it->shape, it->init, it->std);
  fwd.finalize();
  rev.finalize();
  fwd.init(1234);
  rev.init(1234);
  for (const P& p : ps) {
    const Tensor a = fwd.value(fwd.find(p.name)), b = rev.value(rev.find(p.name));
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << p.name << "[" << i << "]";
  }
  // What each init kind gives, and the std of a normal one.
  const Tensor bias = fwd.value(fwd.find("a.bias")), ones = fwd.value(fwd.find("n.weight"));
  for (int64_t i = 0; i < bias.numel(); ++i) EXPECT_EQ(bias.data<float>()[i], 0.0f);
  for (int64_t i = 0; i < ones.numel(); ++i) EXPECT_EQ(ones.data<float>()[i], 1.0f);
  const Tensor w = fwd.value(fwd.find("b.weight"));
  double s2 = 0.0;
  for (int64_t i = 0; i < w.numel(); ++i) s2 += w.data<float>()[i] * w.data<float>()[i];
  EXPECT_GT(std::sqrt(s2 / w.numel()), 0.25);
  EXPECT_LT(std::sqrt(s2 / w.numel()), 1.0);
  // Two normal parameters of the same shape differ (the name is part of the key); so do two seeds.
  ParamStore other;
  other.add("a.weight", {5, 7}, Init::Normal, 0.1f);
  other.add("c.weight", {5, 7}, Init::Normal, 0.1f);
  other.finalize();
  other.init(1235);
  const Tensor a2 = other.value(0), c2 = other.value(1), a1 = fwd.value(fwd.find("a.weight"));
  EXPECT_NE(a2.data<float>()[0], c2.data<float>()[0]);
  EXPECT_NE(a2.data<float>()[0], a1.data<float>()[0]);
  // The same model built twice initialises identically.
  const TransformerConfig cfg = llama_style();
  LanguageModel m1(cfg, gpt_model_spec(cfg), kSingle), m2(cfg, gpt_model_spec(cfg), kSingle);
  m1.params().init(7);
  m2.params().init(7);
  for (int64_t i = 0; i < m1.params().numel(); ++i) ASSERT_EQ(m1.params().values()[i], m2.params().values()[i]);
}

TEST(LanguageModelArena, NoHeapAllocationAfterTheFirstStep) {
  for (const bool llama : {false, true}) {
    const TransformerConfig cfg = llama ? llama_style() : gpt2_style();
    LanguageModel model(cfg, gpt_model_spec(cfg), kSingle);
    model.params().init(3);
    const LmBatch batch = lm_batch();
    const MicroBatch mb = batch.mb(false);
    const double first = model.forward_backward(mb, 1.0f);
    const size_t after_first = model.arena().heap_allocations();
    const size_t high_water = model.arena().high_water();
    EXPECT_GT(high_water, 0u);
    for (int step = 2; step <= 4; ++step) {
      EXPECT_EQ(model.forward_backward(mb, 1.0f), first) << "step " << step;
      EXPECT_EQ(model.arena().heap_allocations(), after_first) << (llama ? "llama" : "gpt2") << " step " << step;
      EXPECT_EQ(model.arena().used(), 0u) << "forward_backward leaves the arena reset";
    }
    EXPECT_EQ(model.forward_loss(mb), first);
    EXPECT_EQ(model.arena().heap_allocations(), after_first);
    EXPECT_EQ(model.arena().high_water(), high_water);
  }
}

}  // namespace
