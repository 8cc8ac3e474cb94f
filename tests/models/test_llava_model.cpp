// The LLaVA model (models/llava_model.h): finite differences through the whole model, from the language
// model's loss back through the projector into the vision tower, with the causal (gpt) and the
// bidirectional (difflm) backbone and both projectors; the image rows are the projected features (the
// placeholder's embedding row gets no gradient from them); frozen parts stay bit for bit over an AdamW
// step; the samplers put each prompt's image into the forwards that hold it (a batch decodes as its
// prompts alone do); under pipeline parallelism the tower and the projector are the first stage's; the
// refusals name their flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "grad_check.h"
#include "infer/sampling.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "models/llava_model.h"
#include "optim/adamw.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;

constexpr int32_t kImage = 5;       // the placeholder id
constexpr int64_t kB = 2, kT = 10;  // P = 4: sequence 0 holds one image, sequence 1 two

// The language model: RoPE, RMSNorm, SwiGLU, untied output, vocabulary 16, hidden 8.
TransformerConfig language_config(bool causal) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = c.num_query_groups = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 12;
  c.vocab_size = 16;
  c.max_position_embeddings = 32;
  c.normalization = NormKind::RMSNorm;
  c.activation = Activation::SwiGLU;
  c.add_bias_linear = false;
  c.position_embedding = PositionEmbedding::Rope;
  c.untie_embeddings_and_output_weights = true;
  c.attention_mask = causal ? MaskType::Causal : MaskType::None;
  return c;
}

// The tower: 8 x 8 images in patches of 4 (P = 4), hidden 6 in 2 heads, 2 layers, features of layer 1.
LlavaOptions llava_options(ProjectorType projector) {
  LlavaOptions o;
  o.clip.image_size = 8;
  o.clip.patch_size = 4;
  o.clip.feature_layer = -2;
  o.vision = clip_vision_config(2, 6, 2, 10, o.clip, 0.02f);
  o.projector = projector;
  o.image_token = kImage;
  return o;
}

std::unique_ptr<LanguageModel> tiny_llava(bool causal, ProjectorType projector) {
  const TransformerConfig cfg = language_config(causal);
  return make_llava_model(cfg, causal ? gpt_model_spec(cfg) : difflm_model_spec(cfg), llava_options(projector),
                          ParallelContext::single());
}

Tensor images(int64_t n, uint64_t seed) {
  Tensor t = Tensor::empty({n, 3, 8, 8}, DType::F32);
  const std::vector<float> v = test::random_vector(t.numel(), seed);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// mb with the images `px` [n, 3, 8, 8] as its own.
MicroBatch with_images(MicroBatch mb, const Tensor& px) {
  mb.pixels.assign(px.data<float>(), px.data<float>() + px.numel());
  mb.images = px.size(0);
  return mb;
}

// Text around the image runs; no loss at image positions (the objectives' loss mask 0 there).
MicroBatch llava_batch() {
  MicroBatch mb;
  mb.B = kB;
  mb.T = kT;
  mb.tokens = {1, 5, 5, 5, 5, 7, 8, 2, 2, 2, /**/ 5, 5, 5, 5, 5, 5, 5, 5, 9, 3};
  mb.targets = {-100, -100, -100, -100, 7, 8, 2, 2, -100, -100, /**/ -100, -100, -100, -100, -100, -100, -100, 9, 3, 4};
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t) mb.positions.push_back(static_cast<int32_t>(t));
  mb.weights = test::random_vector(kB * kT, 73, 0.05f, 0.2f);
  return mb;
}

struct Case {
  bool causal;
  ProjectorType projector;
};

class LlavaGradients : public ::testing::TestWithParam<Case> {};

// Expects f to throw an Error whose message contains `part`.
void expect_error(const std::function<void()>& f, const std::string& part) {
  const std::string e = test::error_of(f);
  EXPECT_NE(e.find(part), std::string::npos) << "expected an Error naming '" << part << "', got '" << e << "'";
}

TEST_P(LlavaGradients, EveryParameterFromTheTowerToTheHeadMatchesFiniteDifferences) {
  const Case c = GetParam();
  auto model = tiny_llava(c.causal, c.projector);
  randomize(model->params(), 70);
  const MicroBatch mb = with_images(llava_batch(), images(3, 71));
  const RunFn run = [&](Arena&, const Tensor&, Tensor* dx) {
    return dx ? model->forward_backward(mb, 1.0f) : model->forward_loss(mb);
  };
  check_gradients(std::string("LLaVA ") + (c.causal ? "gpt " : "difflm ") + projector_type_name(c.projector),
                  model->params(), model->arena(), {}, {0}, run, /*max_samples=*/12);
  // The tower's feature layer and the projector get gradients; the placeholder's embedding row none.
  model->params().zero_grads();
  model->forward_backward(mb, 1.0f);
  const ParamStore& p = model->params();
  auto grad_norm = [&](const std::string& name) {
    const Tensor g = p.grad(p.find(name));
    double s = 0;
    for (int64_t i = 0; i < g.numel(); ++i) s += std::fabs(g.data<float>()[i]);
    return s;
  };
  EXPECT_GT(grad_norm("vision_tower.embeddings.patch_embedding.weight"), 0.0);
  EXPECT_GT(grad_norm("multi_modal_projector.linear_1.weight"), 0.0);
  const Tensor emb = p.grad(p.find("embed_tokens.weight"));
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(emb.data<float>()[kImage * 8 + i], 0.0f) << i;
}

INSTANTIATE_TEST_SUITE_P(Backbones, LlavaGradients,
                         ::testing::Values(Case{true, ProjectorType::Mlp2xGelu}, Case{false, ProjectorType::Mlp2xGelu},
                                           Case{true, ProjectorType::Linear}));

TEST(Llava, TheImageRowsAreTheProjectedFeaturesOfTheirImages) {
  // Swapping the two images of sequence 1 changes its logits; sequence 0 (causal, its own image) keeps its.
  auto model = tiny_llava(true, ProjectorType::Linear);
  model->params().init(3);
  const Tensor px = images(3, 72);
  const Tensor a = model->forward_logits(with_images(llava_batch(), px));
  const std::vector<float> first(a.data<float>(), a.data<float>() + a.numel());
  model->arena().reset();
  Tensor swapped = Tensor::empty(px.shape(), DType::F32);
  const int64_t one = 3 * 8 * 8;
  std::memcpy(swapped.data<float>(), px.data<float>(), one * sizeof(float));
  std::memcpy(swapped.data<float>() + one, px.data<float>() + 2 * one, one * sizeof(float));
  std::memcpy(swapped.data<float>() + 2 * one, px.data<float>() + one, one * sizeof(float));
  const Tensor b = model->forward_logits(with_images(llava_batch(), swapped));
  const int64_t V = 16;
  EXPECT_EQ(0, std::memcmp(first.data(), b.data<float>(), kT * V * sizeof(float)));
  EXPECT_NE(0, std::memcmp(first.data() + kT * V, b.data<float>() + kT * V, kT * V * sizeof(float)));
  model->arena().reset();
  // Too few images for the placeholders: an Error that says so.
  const MicroBatch two = with_images(llava_batch(), images(2, 73));
  expect_error([&] { model->forward_logits(two); }, "12 image positions");
  // Pixel values that are not the images' count: an Error that says so.
  MicroBatch short_pixels = with_images(llava_batch(), px);
  short_pixels.pixels.pop_back();
  expect_error([&] { model->forward_logits(short_pixels); }, "pixel values");
}

TEST(Llava, FrozenPartsStayBitForBitOverAnAdamWStep) {
  for (const bool freeze_vision : {true, false}) {
    auto model = tiny_llava(false, ProjectorType::Mlp2xGelu);
    ParamStore& p = model->params();
    randomize(p, 74);
    LlavaVision& v = llava_vision(*model);
    AdamWConfig cfg;
    cfg.weight_decay = 0.1f;
    AdamW opt(p, cfg);
    const auto [tower_begin, tower_end] = v.tower_params();
    const auto [proj_begin, proj_end] = v.projector_params();
    if (freeze_vision) {
      v.freeze_vision(true);
      opt.freeze(tower_begin, tower_end);
    } else {
      opt.freeze(proj_end, p.count());  // the language model
    }
    const std::vector<float> before(p.values(), p.values() + p.numel());
    p.zero_grads();
    model->forward_backward(with_images(llava_batch(), images(3, 75)), 1.0f);
    opt.apply_and_zero_grads(1e-2, 1.0, {});
    const int frozen_begin = freeze_vision ? tower_begin : proj_end, frozen_end = freeze_vision ? tower_end : p.count();
    for (int id = 0; id < p.count(); ++id) {
      const ParamInfo& info = p.info(id);
      const bool frozen = id >= frozen_begin && id < frozen_end;
      const bool same = std::memcmp(before.data() + info.offset, p.values() + info.offset,
                                    sizeof(float) * static_cast<size_t>(info.shape.numel())) == 0;
      if (frozen) {
        EXPECT_TRUE(same) << info.name;
      }
      if (id >= proj_begin && id < proj_end) {
        EXPECT_FALSE(same) << info.name;  // the projector always trains
      }
    }
  }
}

// The samplers' PromptInputs: a batch of three prompts, each with its own image, decodes as each prompt
// alone with its image (autoregressive with and without the KV cache; diffusion with and without cfg and
// the prefix cache), and the first autoregressive token is the argmax of the prompt's forward with its
// image. Prompt 2 has the image of prompt 0: its text differs, so the batch cannot pass by repeating one.
TEST(Llava, SamplersPutEachPromptsImageIntoTheForwardsThatHoldIt) {
  const Tensor px = images(3, 76);
  const std::vector<int> image_of = {0, 1, 0};
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 5, 5, 5, 5, 7}, {2, 5, 5, 5, 5, 8}, {3, 5, 5, 5, 5, 9}};  // P = 4 image rows each
  const int64_t one = 3 * 8 * 8;
  auto put = [&](const std::vector<int>& which) {
    return [&px, which, one](int64_t first, int64_t count, MicroBatch& mb) {
      mb.pixels.clear();
      for (int64_t j = first; j < first + count; ++j)
        mb.pixels.insert(mb.pixels.end(), px.data<float>() + which[j] * one, px.data<float>() + (which[j] + 1) * one);
      mb.images = count;
    };
  };
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "gpt" : "difflm");
    auto model = tiny_llava(causal, ProjectorType::Mlp2xGelu);
    randomize(model->params(), 77);
    for (int variant = 0; variant < 2; ++variant) {
      std::vector<std::vector<int32_t>> batch;
      std::vector<std::vector<std::vector<int32_t>>> alone(3);
      if (causal) {
        ARSampleOptions o;
        o.max_new_tokens = 4;
        o.vocab_limit = kImage;  // ids below the placeholder's: no image row among the generated
        o.kv_cache = variant == 0;
        o.inputs = put(image_of);
        batch = ar_generate_batch(*model, prompts, o);
        for (int j = 0; j < 3; ++j) {
          o.inputs = put({image_of[j]});
          alone[j] = ar_generate_batch(*model, {prompts[j]}, o);
        }
      } else {
        DiffusionSampleOptions o;
        o.gen_length = o.steps = o.block_length = 4;
        o.mask_token = 15;
        o.vocab_limit = kImage;
        o.cfg_scale = variant == 1 ? 1.0f : 0.0f;
        o.prefix_cache = variant == 1;
        o.block_length = variant == 1 ? 2 : 4;
        o.inputs = put(image_of);
        batch = diffusion_generate_batch(*model, prompts, o);
        for (int j = 0; j < 3; ++j) {
          o.inputs = put({image_of[j]});
          o.seeds = {static_cast<uint64_t>(j)};  // the batch's prompt j draws with seed + j
          alone[j] = diffusion_generate_batch(*model, {prompts[j]}, o);
        }
      }
      for (int j = 0; j < 3; ++j) EXPECT_EQ(batch[j], alone[j][0]) << "variant " << variant << ", prompt " << j;
    }
    if (!causal) continue;
    for (int j = 0; j < 3; ++j) {
      MicroBatch mb;
      mb.B = 1;
      mb.T = static_cast<int64_t>(prompts[j].size());
      mb.tokens = prompts[j];
      for (int64_t t = 0; t < mb.T; ++t) mb.positions.push_back(static_cast<int32_t>(t));
      put({image_of[j]})(0, 1, mb);
      const Tensor lg = model->forward_logits(mb);
      const float* last = lg.data<float>() + (mb.T - 1) * 16;
      const int32_t argmax = static_cast<int32_t>(std::max_element(last, last + kImage) - last);
      model->arena().reset();
      ARSampleOptions o;
      o.max_new_tokens = 1;
      o.vocab_limit = kImage;
      o.inputs = put({image_of[j]});
      EXPECT_EQ(ar_generate_batch(*model, {prompts[j]}, o)[0].at(0), argmax) << j;
    }
  }
}

// Under pipeline parallelism the tower and the projector sit with the token embedding on the first
// stage (their rows replace the embedding's); the last stage holds none of them, and the two stages'
// parameters together are the single-process model's, by name and shape.
TEST(Llava, TheTowerAndProjectorLiveOnTheFirstPipelineStage) {
  const TransformerConfig cfg = language_config(true);
  const auto whole = tiny_llava(true, ProjectorType::Mlp2xGelu);
  std::map<std::string, Shape> want;
  for (int id = 0; id < whole->params().count(); ++id) want[whole->params().info(id).name] = whole->params().info(id).shape;
  std::map<std::string, Shape> got;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    ParallelContext pp2 = ParallelContext::single();
    pp2.pp.size = 2;
    pp2.pp.rank = rank;
    const auto stage = make_llava_model(cfg, gpt_model_spec(cfg), llava_options(ProjectorType::Mlp2xGelu), pp2);
    const ParamStore& p = stage->params();
    int vision_params = 0;
    for (int id = 0; id < p.count(); ++id) {
      const std::string& name = p.info(id).name;
      vision_params += name.rfind("vision_tower.", 0) == 0 || name.rfind("multi_modal_projector.", 0) == 0;
      EXPECT_TRUE(got.emplace(name, p.info(id).shape).second) << name << " on both stages";
    }
    if (rank == 0) {
      EXPECT_EQ(vision_params, llava_vision(*stage).projector_params().second);  // the store's first ids
      EXPECT_GT(vision_params, 0);
    } else {
      EXPECT_EQ(vision_params, 0);
      EXPECT_EQ(stage->inserts(), nullptr);
    }
  }
  EXPECT_EQ(got, want);
}

TEST(Llava, RefusalsNameTheFlag) {
  const TransformerConfig cfg = language_config(true);
  const LlavaOptions opt = llava_options(ProjectorType::Linear);
  // The tower's 2 heads and MLP of 10 split over 2 tp ranks, not over 3.
  ParallelContext tp = ParallelContext::single();
  tp.tp.size = 2;
  EXPECT_EQ(test::error_of([&] { validate_llava(cfg, opt, tp, Device::CPU); }), "");
  tp.tp.size = 3;
  expect_error([&] { validate_llava(cfg, opt, tp, Device::CPU); }, "--tensor-model-parallel-size 3");
  expect_error([&] { validate_llava(cfg, opt, tp, Device::CPU); }, "--vision-num-attention-heads");
  ParallelContext cp2 = ParallelContext::single();
  cp2.cp.size = 2;
  expect_error([&] { validate_llava(cfg, opt, cp2, Device::CPU); }, "--context-parallel-size");
  expect_error([&] { validate_llava(cfg, opt, ParallelContext::single(), Device::CUDA); }, "--device");
  TransformerConfig learned = cfg;
  learned.position_embedding = PositionEmbedding::LearnedAbsolute;
  expect_error([&] { validate_llava(learned, opt, ParallelContext::single(), Device::CPU); },
                              "--position-embedding-type");
  LlavaOptions far = opt;
  far.image_token = 16;
  expect_error([&] { validate_llava(cfg, far, ParallelContext::single(), Device::CPU); }, "image token");
  expect_error([&] { clip_vision_config(2, 6, 4, 10, opt.clip, 0.02f); }, "--vision-num-attention-heads");
  LlavaOptions layer = opt;
  layer.clip.feature_layer = 5;
  expect_error([&] { validate_llava(cfg, layer, ParallelContext::single(), Device::CPU); },
                              "vision_feature_layer");
  expect_error([&] { llava_from_json(nlohmann::json::object(), "ckpt/state.json"); }, "ckpt/state.json");
}

}  // namespace
}  // namespace megadlm
