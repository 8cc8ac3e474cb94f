// HuggingFace LlavaForConditionalGeneration <-> our LLaVA model (checkpoint/hf_llava.h). The fixture
// (tools/reference/make_llava_fixture.py: a tiny random LLaVA, a 2-layer CLIP tower on 8 x 8 images and a
// 2-layer LLaMA text model, as transformers 5's save_pretrained writes it: the legacy names; and its Qwen2
// twin, tied, with q/k/v biases) is imported and
// must give transformers' float64 logits within 1e-5 relative for a batch of two sequences with one image
// each; HF -> ours -> HF reproduces every tensor bit for bit (the export under transformers 5's names),
// directly and through convert_checkpoint's native checkpoint, which generate's loader rebuilds; transformers
// 4's names import to the same model; what either side cannot hold is an Error naming it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../robustness/child_process.h"
#include "checkpoint/hf_llava.h"
#include "checkpoint/model_loader.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_sharded.h"
#include "data/clip_image_processor.h"
#include "hf_fixture_util.h"
#include "infer/llava_prompts.h"
#include "models/gpt_spec.h"
#include "models/llava_model.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::edited_copy;
using test::expect_error_with;
using test::TempDir;

const std::string kFixture = "hf_llava", kQwen2 = "hf_llava_qwen2";  // the LLaMA and the Qwen2 text model
std::string fixture(const std::string& name = kFixture) { return test::hf_fixture(name); }

std::unique_ptr<LanguageModel> import(const std::string& dir) {
  const HfLlavaCheckpoint ck = read_hf_llava_checkpoint(dir);
  const TransformerConfig& cfg = ck.info.text.config;
  auto m = make_llava_model(cfg, gpt_model_spec(cfg), ck.info.options, ParallelContext::single());
  load_params_into(ck.params, m->params(), dir);
  return m;
}

// The largest relative error of the model's logits on fixture `name`'s batch (input_ids [B, T], one image a
// sequence) against transformers' float64 logits.
double logits_error(LanguageModel& model, const std::string& name = kFixture) {
  SafetensorsFile ref(fixture(name) + "/logits.safetensors");
  const Tensor ids = ref.get("input_ids"), want = ref.get("logits");
  const int64_t B = ids.size(0), T = ids.size(1), V = want.size(2);
  MicroBatch mb;
  mb.B = B;
  mb.T = T;
  mb.tokens.assign(ids.data<int32_t>(), ids.data<int32_t>() + B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) mb.positions.push_back(static_cast<int32_t>(t));
  const Tensor px = ref.get("pixel_values");
  mb.pixels.assign(px.data<float>(), px.data<float>() + px.numel());
  mb.images = px.size(0);
  const Tensor got = model.forward_logits(mb);
  EXPECT_EQ(got.numel(), B * T * V);
  const std::vector<double> r(want.data<float>(), want.data<float>() + B * T * V);
  const double err = test::max_rel_error(got.data<float>(), r.data(), B * T * V);
  model.arena().reset();
  return err;
}

// A legacy name (the fixture's) under transformers 5's module names.
std::string v5_name(const std::string& legacy) {
  const std::pair<const char*, const char*> map[] = {{"language_model.model.", "model.language_model."},
                                                     {"language_model.lm_head.", "lm_head."},
                                                     {"vision_tower.", "model.vision_tower."},
                                                     {"multi_modal_projector.", "model.multi_modal_projector."}};
  for (const auto& [from, to] : map)
    if (legacy.rfind(from, 0) == 0) return to + legacy.substr(std::strlen(from));
  return "?" + legacy;
}

// Every tensor of fixture `name` is in `out` under transformers 5's name, bit for bit, and `out` holds no other.
void expect_fixture_tensors_under_v5_names(const std::string& out, const std::string& name = kFixture) {
  ShardedSafetensors a(fixture(name)), b(out);
  EXPECT_EQ(a.names().size(), b.names().size());
  for (const std::string& n : a.names()) {
    const std::string m = v5_name(n);
    ASSERT_TRUE(b.has(m)) << m;
    const Tensor s = a.get(n), t = b.get(m);
    ASSERT_EQ(s.dtype(), t.dtype()) << m;
    ASSERT_EQ(s.shape(), t.shape()) << m;
    EXPECT_EQ(0, std::memcmp(s.raw(), t.raw(), s.nbytes())) << m << " differs after the round trip";
  }
}

TEST(HfLlava, TheImportedFixtureGivesTransformersLogits) {
  const HfLlavaCheckpoint ck = read_hf_llava_checkpoint(fixture());
  EXPECT_EQ(ck.names.language, "language_model.model.");  // transformers 5's save_pretrained: the legacy names
  EXPECT_EQ(ck.names.vision, "vision_tower.");
  EXPECT_EQ(ck.info.options.image_token, 47);
  EXPECT_EQ(ck.info.options.clip.feature_layer, -2);
  EXPECT_EQ(ck.info.options.patches(), 4);
  EXPECT_EQ(ck.info.text.config.num_query_groups, 2);
  EXPECT_TRUE(ck.info.text.config.untie_embeddings_and_output_weights);
  auto m = import(fixture());
  const double err = logits_error(*m);
  EXPECT_LT(err, 1e-5);
  std::printf("  max relative logits error vs transformers (float64), 2 sequences with an image each: %.2e\n", err);
}

TEST(HfLlava, RoundTripReproducesEveryTensorBitForBit) {
  TempDir tmp;
  const HfLlavaCheckpoint ck = read_hf_llava_checkpoint(fixture());
  auto m = import(fixture());
  write_hf_llava_checkpoint(tmp / "out", model_params(m->params()), ck.info, HfWriteOptions{});
  expect_fixture_tensors_under_v5_names(tmp / "out");
  test::expect_same_config(fixture(), tmp / "out",
                           {"architectures", "model_type", "image_token_index", "image_seq_length",
                            "projector_hidden_act", "vision_feature_layer", "vision_feature_select_strategy",
                            "multimodal_projector_bias", "tie_word_embeddings"});
  const nlohmann::json a = test::read_json(fixture() + "/config.json"), b = test::read_json(tmp / "out/config.json");
  for (const char* k : {"model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "image_size", "patch_size", "hidden_act", "layer_norm_eps"})
    EXPECT_EQ(a["vision_config"][k], b["vision_config"][k]) << k;
  for (const char* k : {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps"})
    EXPECT_EQ(a["text_config"][k], b["text_config"][k]) << k;
  // Our export's names read back to the same model.
  const HfLlavaCheckpoint back = read_hf_llava_checkpoint(tmp / "out");
  EXPECT_EQ(back.names.language, "model.language_model.");
  EXPECT_EQ(back.names.head, "lm_head.");
  test::expect_same_params(import(tmp / "out")->params(), m->params());
}

// The Qwen2 text model (q/k/v biases; tied, so the file holds no lm_head): transformers' logits, and HF ->
// ours -> HF bit for bit, directly and through convert_checkpoint's native checkpoint.
TEST(HfLlava, TheQwen2FixtureGivesTransformersLogitsAndRoundTripsBitForBit) {
  const HfLlavaCheckpoint ck = read_hf_llava_checkpoint(fixture(kQwen2));
  EXPECT_EQ(ck.info.text.layout, HfLayout::Qwen2);
  EXPECT_TRUE(ck.info.text.config.add_qkv_bias);
  EXPECT_FALSE(ck.info.text.config.untie_embeddings_and_output_weights);
  auto m = import(fixture(kQwen2));
  const double err = logits_error(*m, kQwen2);
  EXPECT_LT(err, 1e-5);
  std::printf("  qwen2 text model: max relative logits error vs transformers (float64): %.2e\n", err);
  TempDir tmp;
  write_hf_llava_checkpoint(tmp / "out", model_params(m->params()), ck.info, HfWriteOptions{});
  expect_fixture_tensors_under_v5_names(tmp / "out", kQwen2);
  const nlohmann::json a = test::read_json(fixture(kQwen2) + "/config.json"), b = test::read_json(tmp / "out/config.json");
  for (const char* k : {"model_type", "vocab_size", "hidden_size", "num_key_value_heads", "tie_word_embeddings"})
    EXPECT_EQ(a["text_config"][k], b["text_config"][k]) << k;
  EXPECT_EQ(a["tie_word_embeddings"], b["tie_word_embeddings"]);
  test::expect_same_params(import(tmp / "out")->params(), m->params());
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  const auto [native, out] = test::convert_through_native(tmp, kQwen2, {"--layout", "llava"});
  if (HasFailure()) return;
  expect_fixture_tensors_under_v5_names(out, kQwen2);
  EXPECT_LT(logits_error(*load_model(native).model, kQwen2), 1e-5);
}

TEST(HfLlava, TransformersFourNamesImportToTheSameModel) {
  TempDir tmp;
  // The fixture under transformers 4's names: the tower's CLIPVisionModel kept its "vision_model.".
  ShardedSafetensors st(fixture());
  std::vector<SafetensorsEntry> renamed;
  for (const std::string& n : st.names()) {
    const std::string tower = "vision_tower.";
    const std::string v4 = n.rfind(tower, 0) == 0 ? tower + "vision_model." + n.substr(tower.size()) : n;
    renamed.push_back({v4, st.get(n)});
  }
  renamed.push_back({"vision_tower.vision_model.embeddings.position_ids", Tensor::empty({1, 5}, DType::F32)});
  fs::create_directories(tmp / "v4");
  write_safetensors(tmp / "v4/model.safetensors", renamed);
  fs::copy_file(fixture() + "/config.json", tmp / "v4/config.json");
  const HfLlavaCheckpoint ck = read_hf_llava_checkpoint(tmp / "v4");
  EXPECT_EQ(ck.names.vision, "vision_tower.vision_model.");
  auto m = import(tmp / "v4");
  test::expect_same_params(m->params(), import(fixture())->params());
  EXPECT_LT(logits_error(*m), 1e-5);
}

TEST(HfLlava, ConvertCheckpointRoundTripsThroughTheNativeCheckpoint) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  TempDir tmp;
  const auto [native, out] = test::convert_through_native(tmp, kFixture, {"--layout", "llava"});
  if (HasFailure()) return;
  expect_fixture_tensors_under_v5_names(out);
  const nlohmann::json state = test::read_json(native + "/iter_0000000/state.json");
  EXPECT_EQ(state["meta"]["model_type"], "llava");
  EXPECT_EQ(state["meta"]["language_model_type"], "gpt");
  EXPECT_EQ(state["meta"]["llava"]["image_token"], 47);
  EXPECT_EQ(state["meta"]["llava"]["projector_type"], "mlp2x_gelu");
  EXPECT_EQ(state["meta"]["eod"], 2);
  // generate's loader rebuilds the model from the native checkpoint alone.
  LoadedModel lm = load_model(native);
  EXPECT_FALSE(lm.diffusion);
  EXPECT_LT(logits_error(*lm.model), 1e-5);
  // A LLaVA checkpoint exports to its own layout only, and a LLaVA flag needs a LLaVA model.
  auto r = test::run_binary("convert_checkpoint", {"--from-native", native, "--to-hf", tmp / "x", "--layout", "llama"},
                            tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("holds a llava model, which exports to --layout llava only"), std::string::npos) << r.output;
  r = test::run_binary("convert_checkpoint",
                       {"--from-hf", test::hf_fixture("hf_llama"), "--to-native", tmp / "y", "--model-type", "llava"},
                       tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("is not a LLaVA model"), std::string::npos) << r.output;
  // The same checkpoint made a difflm LLaVA (bidirectional, a mask token): no HF class holds it.
  nlohmann::json st = test::read_json(native + "/iter_0000000/state.json");
  st["meta"]["language_model_type"] = "difflm";
  st["meta"]["mask_token"] = 5;
  st["meta"]["config"]["attention_mask_type"] = "no_mask";
  test::write_json(native + "/iter_0000000/state.json", st);
  ASSERT_TRUE(load_model(native).diffusion);
  r = test::run_binary("convert_checkpoint", {"--from-native", native, "--to-hf", tmp / "z"}, tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("layout llava: the language model is a difflm"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp / "z/model.safetensors"));
}

// The image processor's settings travel with the model: an HF directory's preprocessor_config.json is
// recorded in the native checkpoint (and used by generate and evaluate when no --image-processor is
// given), and the export writes it back; without one the export writes CLIP's processor at the model's
// image size. A malformed one stops the import before anything is written, naming the file.
TEST(HfLlava, TheImageProcessorTravelsWithTheModel) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  TempDir tmp;
  const std::string src = tmp / "src";
  fs::copy(fixture(), src, fs::copy_options::recursive);
  const nlohmann::json processor = {{"crop_size", {{"height", 8}, {"width", 8}}},
                                    {"do_center_crop", true},
                                    {"do_convert_rgb", true},
                                    {"do_normalize", true},
                                    {"do_rescale", true},
                                    {"do_resize", true},
                                    {"image_mean", {0.5, 0.4, 0.3}},
                                    {"image_std", {0.2, 0.25, 0.3}},
                                    {"image_processor_type", "CLIPImageProcessor"},
                                    {"resample", 3},
                                    {"rescale_factor", 1.0 / 255.0},
                                    {"size", {{"shortest_edge", 10}}}};
  test::write_json(src + "/preprocessor_config.json", processor);
  const std::string native = tmp / "native", out = tmp / "hf";
  auto r = test::run_binary("convert_checkpoint", {"--from-hf", src, "--to-native", native}, tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_NE(r.output.find("; preprocessor_config.json"), std::string::npos) << r.output;
  const ClipImageConfig want = read_clip_image_config(src + "/preprocessor_config.json");
  const nlohmann::json state = test::read_json(native + "/iter_0000000/state.json");
  EXPECT_EQ(state["meta"]["image_processor"], clip_image_config_json(want));
  // generate's and evaluate's prompts take it when no --image-processor is given.
  LoadedModel lm = load_model(native);
  const LlavaPrompts prompts(lm, "");
  EXPECT_EQ(clip_image_config_json(prompts.processor()), clip_image_config_json(want));
  r = test::run_binary("convert_checkpoint", {"--from-native", native, "--to-hf", out}, tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_NE(r.output.find("preprocessor_config.json (the checkpoint's image processor)"), std::string::npos)
      << r.output;
  EXPECT_EQ(clip_image_config_json(read_clip_image_config(out + "/preprocessor_config.json")),
            clip_image_config_json(want));

  // The fixture itself has none: nothing recorded; the export writes CLIP's processor for 8 x 8 images.
  const auto [plain_native, plain_out] = test::convert_through_native(tmp, kFixture);
  if (HasFailure()) return;
  EXPECT_FALSE(test::read_json(plain_native + "/iter_0000000/state.json")["meta"].contains("image_processor"));
  const ClipImageConfig plain = read_clip_image_config(plain_out + "/preprocessor_config.json");
  EXPECT_EQ(plain.shortest_edge, 8);
  EXPECT_EQ(plain.crop_height, 8);
  EXPECT_EQ(plain.crop_width, 8);
  EXPECT_EQ(plain.mean, ClipImageConfig{}.mean);

  nlohmann::json bad = processor;
  bad["resample"] = 2;
  test::write_json(src + "/preprocessor_config.json", bad);
  r = test::run_binary("convert_checkpoint", {"--from-hf", src, "--to-native", tmp / "bad"}, tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find(src + "/preprocessor_config.json"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp / "bad"));
}

TEST(HfLlava, WhatOurModelCannotHoldIsAnErrorNamingTheKey) {
  TempDir tmp;
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& part) {
    const std::string d = edited_copy(tmp, kFixture, edit);
    expect_error_with([&] { read_hf_llava_checkpoint(d); }, part);
  };
  refused([](nlohmann::json& j) { j["projector_hidden_act"] = "relu"; }, "projector_hidden_act 'relu'");
  refused([](nlohmann::json& j) { j["vision_feature_layer"] = {-2, -1}; }, "vision_feature_layer is a list");
  refused([](nlohmann::json& j) { j["vision_feature_layer"] = 3; }, "vision_feature_layer");
  refused([](nlohmann::json& j) { j["vision_feature_select_strategy"] = "full"; },
          "vision_feature_select_strategy 'full'");
  refused([](nlohmann::json& j) { j["multimodal_projector_bias"] = false; }, "multimodal_projector_bias");
  refused([](nlohmann::json& j) { j["text_config"]["model_type"] = "mistral"; }, "text_config.model_type 'mistral'");
  refused([](nlohmann::json& j) { j["vision_config"]["model_type"] = "siglip_vision_model"; },
          "vision_config.model_type 'siglip_vision_model'");
  refused([](nlohmann::json& j) { j["image_token_index"] = 48; }, "image_token_index 48");
  refused([](nlohmann::json& j) { j.erase("text_config"); }, "'text_config'");
  // Tied in config.json, but the file's lm_head differs from the embedding.
  refused([](nlohmann::json& j) { j["tie_word_embeddings"] = true; }, "differs from 'language_model.model.embed_tokens");
  // A size that disagrees with the tensors names the tensor.
  refused([](nlohmann::json& j) { j["vision_config"]["intermediate_size"] = 40; }, "vision_tower.encoder.layers.0.mlp.fc1");
  // The text layouts' reader (--load-hf, convert_checkpoint's text path) sends a LLaVA config here.
  expect_error_with([] { hf_config_to_info(test::read_json(fixture() + "/config.json"), "cfg"); },
                    "a LLaVA model (LlavaForConditionalGeneration): convert_checkpoint converts it (layout llava)");
  // image_token_id, transformers' other name, is read too.
  const std::string d = edited_copy(tmp, kFixture, [](nlohmann::json& j) {
    j.erase("image_token_index");
    j["image_token_id"] = 40;
  });
  EXPECT_EQ(read_hf_llava_checkpoint(d).info.options.image_token, 40);
}

// llava-hf's config.json files (llava-1.5-7b-hf) give text_config and vision_config only where they differ
// from LlamaConfig's and CLIPVisionConfig's defaults, which transformers then fills in.
TEST(HfLlava, AbsentSettingsTakeTransformersDefaults) {
  nlohmann::json j = test::read_json(fixture() + "/config.json");
  j["text_config"] = {{"model_type", "llama"}, {"vocab_size", 48}, {"hidden_size", 16}, {"intermediate_size", 32},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
  j["vision_config"] = {{"model_type", "clip_vision_model"}, {"hidden_size", 16}, {"intermediate_size", 32},
                        {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"image_size", 8}, {"patch_size", 4}};
  for (const char* key : {"projector_hidden_act", "vision_feature_layer", "vision_feature_select_strategy",
                          "multimodal_projector_bias", "tie_word_embeddings"})
    j.erase(key);
  const HfLlavaInfo info = hf_llava_config_to_info(j, "cfg");
  const TransformerConfig& t = info.text.config;
  EXPECT_EQ(t.max_position_embeddings, 2048);
  EXPECT_EQ(t.num_query_groups, 4);
  EXPECT_FLOAT_EQ(t.norm_epsilon, 1e-6f);
  EXPECT_TRUE(t.untie_embeddings_and_output_weights);
  EXPECT_EQ(info.text.bos_token_id, 1);
  EXPECT_EQ(info.text.eos_token_id, 2);
  EXPECT_EQ(info.options.clip.activation, HostActivation::QuickGelu);
  EXPECT_EQ(info.options.clip.feature_layer, -2);
  EXPECT_EQ(info.options.projector, ProjectorType::Mlp2xGelu);
  EXPECT_EQ(info.options.image_token, 47);
  // Qwen2Config's: its own maximum length, no bos / eos.
  j["text_config"]["model_type"] = "qwen2";
  const HfLlavaInfo qwen2 = hf_llava_config_to_info(j, "cfg");
  EXPECT_EQ(qwen2.text.layout, HfLayout::Qwen2);
  EXPECT_EQ(qwen2.text.config.max_position_embeddings, 32768);
  EXPECT_TRUE(qwen2.text.config.add_qkv_bias);
  EXPECT_EQ(qwen2.text.bos_token_id, -1);
  EXPECT_EQ(qwen2.text.eos_token_id, -1);
  j["text_config"].erase("vocab_size");
  j["image_token_index"] = 151935;
  EXPECT_EQ(hf_llava_config_to_info(j, "cfg").text.config.vocab_size, 151936);
}

TEST(HfLlava, TheExportRefusesWhatLlavaForConditionalGenerationCannotHold) {
  TempDir tmp;
  const HfLlavaCheckpoint ck = read_hf_llava_checkpoint(fixture());
  auto m = import(fixture());
  const std::vector<SafetensorsEntry> params = model_params(m->params());
  HfLlavaInfo linear = ck.info;
  linear.options.projector = ProjectorType::Linear;
  expect_error_with([&] { write_hf_llava_checkpoint(tmp / "a", params, linear, HfWriteOptions{}); },
                    "the projector is 'linear'");
  HfLlavaInfo difflm = ck.info;
  difflm.text.diffusion = true;
  difflm.text.config.attention_mask = MaskType::None;
  expect_error_with([&] { write_hf_llava_checkpoint(tmp / "b", params, difflm, HfWriteOptions{}); },
                    "difflm (diffusion, bidirectional) backbone");
  HfLlavaInfo qwen3 = ck.info;
  qwen3.text.config.qk_layernorm = true;
  expect_error_with([&] { write_hf_llava_checkpoint(tmp / "c", params, qwen3, HfWriteOptions{}); },
                    "exports as qwen3");
  EXPECT_FALSE(fs::exists(tmp / "a") || fs::exists(tmp / "b") || fs::exists(tmp / "c"));
}

}  // namespace
