// HuggingFace CLIP vision towers <-> ours (checkpoint/hf_clip.h). The fixture
// (tools/reference/make_clip_vision_fixture.py: a tiny random CLIPVisionModel with the quick GELU, 3
// layers) is imported and must give transformers' float64 outputs within 1e-5 relative: the features
// LLaVA reads (hidden_states[-2] without the class token), last_hidden_state, pooler_output; LLaVA's
// projectors give torch's. HF -> ours -> HF reproduces every tensor bit for bit, directly (with the
// file's prefix or transformers 4's "vision_model.") and through convert_checkpoint's native
// checkpoint; what the layout cannot hold is an Error naming it.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../robustness/child_process.h"
#include "checkpoint/hf_clip.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_sharded.h"
#include "data/clip_image_processor.h"
#include "hf_fixture_util.h"
#include "nn/vision_projector.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::edited_copy;
using test::expect_error_with;
using test::expect_same_tensors;
using test::TempDir;

const std::string kFixture = "hf_clip_vision";
std::string fixture() { return test::hf_fixture(kFixture); }

std::unique_ptr<ClipVisionModel> import(const std::string& dir) {
  const HfClipVisionCheckpoint ck = read_hf_clip_vision_checkpoint(dir);
  auto m = std::make_unique<ClipVisionModel>(ck.info.config, ck.info.options, ParallelContext::single());
  load_params_into(ck.params, m->params(), dir);
  return m;
}

std::vector<double> doubles(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

struct Errors {
  double features = 0, last_hidden = 0, pooled = 0;
};

// Our outputs of the fixture's pixel values against transformers'.
Errors output_errors(ClipVisionModel& m) {
  SafetensorsFile ref(fixture() + "/outputs.safetensors");
  const Tensor px = ref.get("pixel_values");
  const ClipVisionModel::Outputs out = m.forward(px);
  // hidden_states[-2] [B, S, C] without each image's first row.
  const Tensor hs = ref.get("hidden_states_m2");
  const int64_t B = hs.size(0), S = hs.size(1), C = hs.size(2);
  std::vector<double> features;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = C; i < S * C; ++i) features.push_back(hs.data<float>()[b * S * C + i]);
  EXPECT_EQ(out.features.numel(), static_cast<int64_t>(features.size()));
  Errors e;
  e.features = test::max_rel_error(out.features.data<float>(), features.data(), out.features.numel());
  e.last_hidden = test::max_rel_error(out.last_hidden.data<float>(), doubles(ref.get("last_hidden_state")).data(),
                                      out.last_hidden.numel());
  e.pooled = test::max_rel_error(out.pooled.data<float>(), doubles(ref.get("pooler_output")).data(), out.pooled.numel());
  return e;
}

void expect_transformers_outputs(ClipVisionModel& m, const char* what) {
  const Errors e = output_errors(m);
  EXPECT_LT(e.features, 1e-5) << what;
  EXPECT_LT(e.last_hidden, 1e-5) << what;
  EXPECT_LT(e.pooled, 1e-5) << what;
  std::printf("  %s: max relative error vs transformers: features (hidden_states[-2]) %.2e, last_hidden_state %.2e, "
              "pooler_output %.2e\n", what, e.features, e.last_hidden, e.pooled);
}

TEST(HfClipVision, TheImportedFixtureGivesTransformersOutputs) {
  auto m = import(fixture());
  EXPECT_EQ(m->config().num_layers, 3);
  EXPECT_EQ(m->patches(), 16);
  EXPECT_EQ(m->options().activation, HostActivation::QuickGelu);
  EXPECT_EQ(m->options().feature_layer, -2);
  expect_transformers_outputs(*m, "fixture");
}

TEST(HfClipVision, TheProjectorsGiveTorchsOutputs) {
  SafetensorsFile ref(fixture() + "/projector.safetensors");
  const Tensor x = ref.get("x");
  // The projector's Linears keep a pointer to the context: it outlives them.
  const ParallelContext ctx = ParallelContext::single();
  for (const auto& [type, name] : {std::pair{ProjectorType::Mlp2xGelu, "multi_modal_projector"},
                                   std::pair{ProjectorType::Linear, "linear"}}) {
    ParamStore store;
    VisionProjector proj(store, ctx, name, type, 32, 48, 0.02f);
    store.finalize();
    std::vector<SafetensorsEntry> params;
    for (const ParamInfo& p : store.infos()) params.push_back({p.name, ref.get(p.name)});
    load_params_into(params, store, fixture() + "/projector.safetensors");
    Arena arena;
    const Tensor y = proj.forward(arena, x);
    const std::string key = type == ProjectorType::Mlp2xGelu ? "y_mlp2x_gelu" : "y_linear";
    const double e = test::max_rel_error(y.data<float>(), doubles(ref.get(key)).data(), y.numel());
    EXPECT_LT(e, 1e-5) << key;
    std::printf("  projector %s: max relative error vs torch %.2e\n", key.c_str() + 2, e);
  }
}

TEST(HfClipVision, RoundTripReproducesEveryTensorBitForBit) {
  TempDir tmp;
  auto m = import(fixture());
  const HfClipVisionCheckpoint ck = read_hf_clip_vision_checkpoint(fixture());
  EXPECT_EQ(ck.info.prefix, "");  // transformers 5 writes CLIPVisionModel's tensors without one
  write_hf_clip_vision_checkpoint(tmp / "same", model_params(m->params()), ck.info, HfWriteOptions{});
  expect_same_tensors(fixture(), tmp / "same");
  test::expect_same_config(fixture(), tmp / "same",
                           {"architectures", "model_type", "hidden_act", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads", "image_size", "patch_size", "layer_norm_eps"});
  // transformers 4's names, and back: the same parameters, bit for bit.
  HfClipVisionInfo v4 = ck.info;
  v4.prefix = "vision_model.";
  write_hf_clip_vision_checkpoint(tmp / "v4", model_params(m->params()), v4, HfWriteOptions{});
  EXPECT_TRUE(ShardedSafetensors(tmp / "v4").has("vision_model.encoder.layers.2.self_attn.out_proj.weight"));
  auto back = import(tmp / "v4");
  test::expect_same_params(back->params(), m->params());
  expect_transformers_outputs(*back, "vision_model. prefix");
}

TEST(HfClipVision, ConvertCheckpointRoundTripsThroughTheNativeCheckpoint) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  TempDir tmp;
  const auto [native, out] = test::convert_through_native(tmp, kFixture, {"--layout", "clip_vision"});
  if (HasFailure()) return;
  expect_same_tensors(fixture(), out);
  expect_transformers_outputs(*import(out), "through convert_checkpoint");
  const nlohmann::json state = test::read_json(native + "/iter_0000000/state.json");
  EXPECT_EQ(state["meta"]["model_type"], "clip_vision");
  EXPECT_EQ(state["meta"]["clip_vision"]["hidden_act"], "quick_gelu");
  EXPECT_EQ(state["meta"]["clip_vision"]["vision_feature_layer"], -2);
  // The fixture has no preprocessor_config.json: the export writes CLIP's processor for its 32 x 32
  // images (HfLlava.TheImageProcessorTravelsWithTheModel: a recorded one is written back).
  EXPECT_FALSE(state["meta"].contains("image_processor"));
  const ClipImageConfig processor = read_clip_image_config(out + "/preprocessor_config.json");
  EXPECT_EQ(processor.shortest_edge, 32);
  EXPECT_EQ(processor.crop_height, 32);
  EXPECT_EQ(processor.crop_width, 32);
  // A CLIP tower exports to its own layout only.
  const auto r = test::run_binary("convert_checkpoint", {"--from-native", native, "--to-hf", tmp / "x", "--layout", "bert"},
                            tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("holds a clip_vision model, which exports to --layout clip_vision only"), std::string::npos)
      << r.output;
}

TEST(HfClipVision, GenerateAndTheLanguageModelPathsRefuseItByName) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  MEGADLM_REQUIRE_BINARY("generate");
  TempDir tmp;
  const std::string native = tmp / "native";
  auto r = test::run_binary("convert_checkpoint", {"--from-hf", fixture(), "--to-native", native}, tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  r = test::run_binary("generate", {"--load", native, "--prompt", "x"}, tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("a clip_vision model (CLIP's vision tower)"), std::string::npos) << r.output;
  expect_error_with([] { hf_config_to_info(test::read_json(fixture() + "/config.json"), "c.json"); },
                    "c.json: a CLIP model (CLIPVisionModel): convert_checkpoint converts its vision tower");
  // A directory that is not CLIP's, named as one.
  r = test::run_binary("convert_checkpoint",
                       {"--from-hf", test::hf_fixture("hf_llama"), "--to-native", tmp / "x", "--layout", "clip_vision"},
                       tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("is not a CLIP vision model"), std::string::npos) << r.output;
}

TEST(HfClipVision, WhatTheLayoutCannotHoldIsAnErrorNamingIt) {
  TempDir tmp;
  auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    fs::remove_all(tmp / kFixture);
    return edited_copy(tmp, kFixture, edit);
  };
  expect_error_with([&] { read_hf_clip_vision_checkpoint(edited([](auto& j) { j["hidden_act"] = "relu"; })); },
                    "hidden_act 'relu' is not built");
  expect_error_with([&] { read_hf_clip_vision_checkpoint(edited([](auto& j) { j["num_channels"] = 4; })); },
                    "num_channels 4 is not built");
  expect_error_with([&] { read_hf_clip_vision_checkpoint(edited([](auto& j) { j["patch_size"] = 5; })); },
                    "image_size 32 is not a multiple of patch_size 5");
  expect_error_with([&] { read_hf_clip_vision_checkpoint(edited([](auto& j) { j["image_size"] = 40; })); },
                    "'embeddings.position_embedding.weight' has shape [17, 32], but config.json implies [26, 32]");
  expect_error_with([&] { read_hf_clip_vision_checkpoint(edited([](auto& j) { j["num_hidden_layers"] = 4; })); },
                    "tensor 'encoder.layers.3.layer_norm1.weight' (for our encoder.layers.3.input_layernorm.weight) is missing");
  expect_error_with([&] { read_hf_clip_vision_checkpoint(edited([](auto& j) { j["num_hidden_layers"] = 2; })); },
                    "is not used by the clip_vision layout");
  // A CLIPModel's config reads its vision_config.
  const std::string clip = edited([](auto& j) {
    nlohmann::json v = j;
    j = nlohmann::json{{"model_type", "clip"}, {"architectures", {"CLIPModel"}}, {"vision_config", v}};
  });
  EXPECT_TRUE(is_hf_clip_vision_config(test::read_json(clip + "/config.json")));
  expect_transformers_outputs(*import(clip), "CLIPModel config");
}

}  // namespace
