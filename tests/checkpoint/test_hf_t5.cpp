// HuggingFace T5 <-> ours (checkpoint/hf_t5.h). The fixtures (tools/reference/make_t5_fixture.py: a tiny
// random T5ForConditionalGeneration v1.0 with ReLU and the tied, scaled output; a v1.1 with the gated
// GELU and an untied lm_head; both with d_kv * heads != d_model) are imported and must give
// transformers' float64 logits within 1e-5 relative on a padded batch; HF -> ours -> HF reproduces every
// tensor bit for bit, directly and through convert_checkpoint's native checkpoint; what the layout
// cannot hold is an Error naming it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../robustness/child_process.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_json.h"
#include "checkpoint/hf_t5.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_sharded.h"
#include "hf_fixture_util.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::edited_copy;
using test::expect_error_with;
using test::expect_same_tensors;
using test::hf_fixture;
using test::read_json;
using test::TempDir;

std::unique_ptr<T5Model> import(const std::string& dir) {
  const HfT5Checkpoint ck = read_hf_t5_checkpoint(dir);
  auto m = std::make_unique<T5Model>(ck.info.config, ck.info.options, ParallelContext::single());
  load_params_into(ck.params, m->params(), dir);
  return m;
}

std::vector<int32_t> ints(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

// Our logits of the fixture's inputs against transformers' (every decoder row: none is padded).
double logits_error(T5Model& m, const std::string& fixture_dir) {
  SafetensorsFile ref(fixture_dir + "/logits.safetensors");
  T5Batch b;
  const Tensor ids = ref.get("input_ids"), dec = ref.get("decoder_input_ids");
  b.B = ids.size(0);
  b.S = ids.size(1);
  b.T = dec.size(1);
  b.encoder_tokens = ints(ids);
  b.encoder_mask = ints(ref.get("attention_mask"));
  b.decoder_tokens = ints(dec);
  b.decoder_mask = ints(ref.get("decoder_attention_mask"));
  const Tensor got = m.forward_logits(b);
  const Tensor want = ref.get("logits");
  EXPECT_EQ(got.numel(), want.numel());
  const std::vector<double> w(want.data<float>(), want.data<float>() + want.numel());
  return test::max_rel_error(got.data<float>(), w.data(), want.numel());
}

TEST(HfT5, ImportedFixturesGiveTransformersLogits) {
  for (const char* name : {"hf_t5", "hf_t5_v11"}) {
    auto m = import(hf_fixture(name));
    const double e = logits_error(*m, hf_fixture(name));
    EXPECT_LT(e, 1e-5) << name << ": logits differ from transformers by " << e;
    std::printf("  %-10s max relative error vs transformers: %.2e\n", name, e);
  }
  auto v10 = import(hf_fixture("hf_t5")), v11 = import(hf_fixture("hf_t5_v11"));
  EXPECT_TRUE(v10->tied());
  EXPECT_TRUE(v10->options().scale_output);
  EXPECT_EQ(v10->options().feed_forward, T5FeedForward::Relu);
  EXPECT_FALSE(v11->tied());
  EXPECT_FALSE(v11->options().scale_output);
  EXPECT_EQ(v11->options().feed_forward, T5FeedForward::GatedGelu);
  EXPECT_EQ(v11->config().kv_channels * v11->config().num_attention_heads, 24);
  EXPECT_EQ(v11->config().hidden_size, 32);
}

TEST(HfT5, RoundTripReproducesEveryTensorBitForBit) {
  TempDir tmp;
  for (const char* name : {"hf_t5", "hf_t5_v11"}) {
    auto m = import(hf_fixture(name));
    write_hf_t5_checkpoint(tmp / name, model_params(m->params()), hf_t5_info(*m), HfWriteOptions{});
    expect_same_tensors(hf_fixture(name), tmp / name);
    test::expect_same_config(hf_fixture(name), tmp / name,
                             {"architectures", "model_type", "vocab_size", "d_model", "d_kv", "d_ff", "num_layers",
                              "num_decoder_layers", "num_heads", "relative_attention_num_buckets",
                              "relative_attention_max_distance", "feed_forward_proj", "layer_norm_epsilon",
                              "tie_word_embeddings"});
    test::expect_same_params(import(tmp / name)->params(), m->params());
  }
}

TEST(HfT5, ConvertCheckpointRoundTripsThroughTheNativeCheckpoint) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  TempDir tmp;
  for (const char* name : {"hf_t5", "hf_t5_v11"}) {
    const auto [native, out] = test::convert_through_native(tmp, name);
    if (HasFailure()) return;
    expect_same_tensors(hf_fixture(name), out);
    EXPECT_LT(logits_error(*import(out), hf_fixture(name)), 1e-5);
    const nlohmann::json state = read_json(native + "/iter_0000000/state.json");
    EXPECT_EQ(state["meta"]["model_type"], "t5");
    EXPECT_EQ(state["meta"]["hf"]["layout"], "t5");
    EXPECT_EQ(state["meta"]["t5"]["feed_forward_proj"], std::string(name) == "hf_t5" ? "relu" : "gated-gelu");
    // A t5 checkpoint exports to the t5 layout only, and generate refuses it by name.
    const auto r = test::run_binary("convert_checkpoint",
                                    {"--from-native", native, "--to-hf", tmp / "x", "--layout", "llama"}, tmp / "log.txt");
    EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
    EXPECT_NE(r.output.find("exports to --layout t5 only"), std::string::npos) << r.output;
  }
}

TEST(HfT5, WhatTheLayoutCannotHoldIsAnErrorNamingIt) {
  TempDir tmp;
  expect_error_with(
      [&] { read_hf_t5_checkpoint(edited_copy(tmp, "hf_t5", [](auto& j) { j["feed_forward_proj"] = "gated-silu"; })); },
      "feed_forward_proj 'gated-silu' is not built for T5");
  expect_error_with([&] {
    read_hf_t5_checkpoint(edited_copy(tmp, "hf_t5", [](auto& j) { j["architectures"] = {"T5EncoderModel"}; }));
  }, "architecture 'T5EncoderModel' is not converted");
  // config.json implies d_kv 8 (q [32, 32]); the file holds d_kv 6.
  expect_error_with([&] { read_hf_t5_checkpoint(edited_copy(tmp, "hf_t5", [](auto& j) { j["d_kv"] = 8; })); },
                    "'encoder.block.0.layer.0.SelfAttention.q.weight' has shape [24, 32], but config.json implies [32, 32]");
  expect_error_with([&] { read_hf_t5_checkpoint(edited_copy(tmp, "hf_t5", [](auto& j) { j.erase("d_model"); })); },
                    "config.json lacks 'd_model'");
  expect_error_with([&] { read_hf_t5_checkpoint(edited_copy(tmp, "hf_t5", [](auto& j) { j["num_decoder_layers"] = 3; })); },
                    "tensor 'decoder.block.2.layer.0.layer_norm.weight' (for our decoder.layers.2.input_layernorm.weight) is missing");
}

TEST(HfT5, EmbeddingCopiesAndStrayTensorsAreChecked) {
  TempDir tmp;
  ShardedSafetensors src(hf_fixture("hf_t5"));
  std::vector<SafetensorsEntry> t;
  for (const auto& n : src.names()) t.push_back({n, src.get(n)});
  auto write = [&](const std::vector<SafetensorsEntry>& tensors) {
    fs::remove_all(tmp / "d");
    fs::create_directories(tmp / "d");
    fs::copy_file(hf_fixture("hf_t5") + "/config.json", tmp / "d/config.json");
    write_safetensors(tmp / "d/model.safetensors", tensors, {});
    return tmp / "d";
  };
  auto copies = t;
  copies.push_back({"encoder.embed_tokens.weight", src.get("shared.weight")});
  copies.push_back({"lm_head.weight", src.get("shared.weight")});  // tied: the same values
  EXPECT_TRUE(import(write(copies))->tied());
  auto differs = t;
  differs.push_back({"decoder.embed_tokens.weight", Tensor::zeros(src.get("shared.weight").shape(), DType::F32)});
  expect_error_with([&] { read_hf_t5_checkpoint(write(differs)); },
                    "'decoder.embed_tokens.weight' differs from 'shared.weight'");
  auto stray = t;
  stray.push_back({"encoder.block.2.layer.1.DenseReluDense.wo.weight", Tensor::zeros({32, 40}, DType::F32)});
  expect_error_with([&] { read_hf_t5_checkpoint(write(stray)); },
                    "tensor 'encoder.block.2.layer.1.DenseReluDense.wo.weight' is not used by the t5 layout");
}

// A tied output without the scaling (a v1.1 saved by transformers 5) exports the embedding as lm_head
// too, with tie_word_embeddings false, and reads back the same.
TEST(HfT5, TiedUnscaledOutputRoundTrips) {
  TempDir tmp;
  auto m = import(hf_fixture("hf_t5"));
  HfT5Info info = hf_t5_info(*m);
  info.options.scale_output = false;
  write_hf_t5_checkpoint(tmp / "u", model_params(m->params()), info, HfWriteOptions{});
  const nlohmann::json cfg = read_json(tmp / "u/config.json");
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["scale_decoder_outputs"], false);
  const ShardedSafetensors st(tmp / "u");
  ASSERT_TRUE(st.has("lm_head.weight"));
  EXPECT_TRUE(hf_same_tensor(st, "lm_head.weight", "shared.weight"));
  auto back = import(tmp / "u");
  EXPECT_TRUE(back->tied());
  EXPECT_FALSE(back->options().scale_output);
}

}  // namespace

namespace {

// pretrain_difflm imports no T5 directory (convert_checkpoint does): a T5 directory (--load-hf's
// translation) and --load-hf with --model-type t5 are refused by name. generate takes the converted
// checkpoint (tests/infer/test_t5_generation.cpp) but needs a tokenizer, which the fixture has none of.
TEST(HfT5, TrainingRefusesT5DirectoriesAndGenerateNamesTheMissingTokenizer) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  MEGADLM_REQUIRE_BINARY("generate");
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  TempDir tmp;
  const std::string native = tmp / "native";
  auto r = test::run_binary("convert_checkpoint", {"--from-hf", hf_fixture("hf_t5"), "--to-native", native},
                            tmp / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  auto refused = [&](const char* binary, const std::vector<std::string>& args, const std::string& part) {
    const auto c = test::run_binary(binary, args, tmp / "log.txt");
    EXPECT_TRUE(c.exited && c.exit_code == 1) << binary << ": " << c.output;
    EXPECT_NE(c.output.find(part), std::string::npos) << c.output;
  };
  refused("generate", {"--load", native, "--prompt", "x"}, "state.json: no tokenizer recorded");
  // --load-hf reads config.json through the gpt / difflm translation, which names T5's own path.
  expect_error_with([] { hf_config_to_info(read_json(hf_fixture("hf_t5") + "/config.json"), "c.json"); },
                    "c.json: a T5 model (T5ForConditionalGeneration): convert_checkpoint converts it");
  refused("pretrain_difflm", {"--model-type", "t5", "--load-hf", hf_fixture("hf_t5"), "--data-path", "x"},
          "--load-hf does not apply to --model-type t5");
}

}  // namespace
