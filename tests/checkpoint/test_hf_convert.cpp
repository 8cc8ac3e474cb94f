// HuggingFace import/export against transformers: tiny random models of each architecture, saved by
// tools/reference/hf_fixtures.py with their logits (computed in float64 by transformers), are
// imported and must give the same logits; HF -> ours -> HF (directly, through files, through a
// native checkpoint, and through LLaDA's layout) must reproduce every tensor bit for bit; bad index
// files and unsupported config fields must give Errors naming the file and field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_convert.h"
#include "checkpoint/model_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/error.h"
#include "models/config_json.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) {
  return std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/hf_" + name;
}

using test::TempDir;

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one mentioning '" << parts.front() << "')";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

std::unique_ptr<LanguageModel> build(const TransformerConfig& cfg, bool bidirectional = false) {
  TransformerConfig c = cfg;
  c.attention_mask = bidirectional ? MaskType::None : MaskType::Causal;
  const ModelSpec spec = bidirectional ? decoder_model_spec(c, difflm_layer_spec(c, c.attention_mask, 0)) : gpt_model_spec(c);
  return std::make_unique<LanguageModel>(c, spec, ParallelContext::single());
}

// Logits of the fixture's input ids, compared with transformers' (float64) logits: "logits" (causal)
// or "logits_bidirectional" (transformers with config.is_causal = false).
double logits_error(LanguageModel& model, const std::string& dir, const char* which = "logits") {
  SafetensorsFile ref(dir + "/logits.safetensors");
  const Tensor ids = ref.get("input_ids");
  const Tensor want = ref.get(which);
  const int64_t T = ids.size(1), V = want.size(2);
  std::vector<int32_t> tok(ids.data<int32_t>(), ids.data<int32_t>() + T), pos(T);
  std::iota(pos.begin(), pos.end(), 0);
  MicroBatch mb;
  mb.B = 1;
  mb.T = T;
  mb.tokens = tok;
  mb.positions = pos;
  Tensor got = model.forward_logits(mb);
  EXPECT_EQ(got.numel(), T * V);
  std::vector<double> r(want.data<float>(), want.data<float>() + T * V);
  const double err = test::max_rel_error(got.data<float>(), r.data(), T * V);
  model.arena().reset();
  return err;
}

// Every tensor of the HF directory `a` equals (bytes, dtype, shape) the one of the same name in `b`.
void expect_same_tensors(const std::string& a, const std::string& b, bool tied) {
  ShardedSafetensors x(a), y(b);
  std::vector<std::string> xn = x.names(), yn = y.names();
  if (tied) std::erase(xn, "lm_head.weight");
  EXPECT_EQ(xn, yn);
  for (const auto& n : xn) {
    if (!y.has(n)) continue;
    const Tensor s = x.get(n), t = y.get(n);
    ASSERT_EQ(s.dtype(), t.dtype()) << n;
    ASSERT_EQ(s.shape(), t.shape()) << n;
    EXPECT_EQ(0, std::memcmp(s.raw(), t.raw(), s.nbytes())) << n << " differs after the round trip";
  }
}

const char* kArchs[] = {"gpt2", "llama", "qwen2", "qwen3", "qwen3_bf16", "mixtral", "qwen3_moe"};

}  // namespace

TEST(HfConvert, ImportedLogitsMatchTransformers) {
  for (const char* a : kArchs) {
    SCOPED_TRACE(a);
    const HfCheckpoint ck = read_hf_checkpoint(fixture(a));
    auto model = build(ck.info.config);
    load_params_into(ck.params, model->params(), a);
    const double err = logits_error(*model, fixture(a));
    EXPECT_LT(err, 1e-4) << a << ": logits differ from transformers by " << err;
    // The same weights in a diffusion model (no mask) against transformers with is_causal = false.
    auto bidir = build(ck.info.config, true);
    load_params_into(ck.params, bidir->params(), a);
    const double err_b = logits_error(*bidir, fixture(a), "logits_bidirectional");
    EXPECT_LT(err_b, 1e-4) << a << ": bidirectional logits differ from transformers by " << err_b;
    std::printf("  %-11s max relative logits error vs transformers: causal %.2e, bidirectional %.2e\n", a, err, err_b);
  }
}

TEST(HfConvert, ConfigsMapToOurs) {
  const TransformerConfig g = read_hf_checkpoint(fixture("gpt2")).info.config;
  EXPECT_EQ(g.position_embedding, PositionEmbedding::LearnedAbsolute);
  EXPECT_EQ(g.ffn_hidden_size, 80);
  EXPECT_FALSE(g.untie_embeddings_and_output_weights);
  const TransformerConfig l = read_hf_checkpoint(fixture("llama")).info.config;
  EXPECT_EQ(l.num_query_groups, 2);
  EXPECT_TRUE(l.untie_embeddings_and_output_weights);
  const TransformerConfig q2 = read_hf_checkpoint(fixture("qwen2")).info.config;
  EXPECT_TRUE(q2.add_qkv_bias);
  EXPECT_EQ(q2.rotary_base, 1e6);
  const HfCheckpoint q3 = read_hf_checkpoint(fixture("qwen3"));
  EXPECT_TRUE(q3.info.config.qk_layernorm);
  EXPECT_EQ(q3.info.config.kv_channels, 16);
  EXPECT_EQ(q3.dtype, DType::F32);
  EXPECT_EQ(read_hf_checkpoint(fixture("qwen3_bf16")).dtype, DType::BF16);
  const TransformerConfig mx = read_hf_checkpoint(fixture("mixtral")).info.config;
  EXPECT_EQ(mx.moe.num_experts, 4);
  EXPECT_EQ(mx.moe.topk, 2);
  EXPECT_FALSE(mx.moe.pre_softmax);  // softmax, top-k, renormalised
  EXPECT_TRUE(mx.moe.is_moe_layer(0) && mx.moe.is_moe_layer(1));
  const TransformerConfig qm = read_hf_checkpoint(fixture("qwen3_moe")).info.config;
  EXPECT_TRUE(qm.moe.pre_softmax);   // norm_topk_prob false
  EXPECT_EQ(qm.moe.ffn_hidden_size, 16);
  EXPECT_EQ(qm.ffn_hidden_size, 64);
  EXPECT_TRUE(qm.moe.is_moe_layer(0));
  EXPECT_FALSE(qm.moe.is_moe_layer(1));  // mlp_only_layers [1]
  EXPECT_EQ(default_hf_layout(qm), HfLayout::Qwen3Moe);
  EXPECT_EQ(default_hf_layout(mx), HfLayout::Mixtral);
}

TEST(HfConvert, RoundTripIsBitExact) {
  for (const char* a : kArchs) {
    SCOPED_TRACE(a);
    TempDir tmp;
    const HfCheckpoint ck = read_hf_checkpoint(fixture(a));
    // Through the model's flat buffer and a sharded write.
    auto model = build(ck.info.config);
    load_params_into(ck.params, model->params(), a);
    write_hf_checkpoint(tmp / "direct", model_params(model->params()), ck.info, {ck.dtype, 20000});
    expect_same_tensors(fixture(a), tmp / "direct", !ck.info.config.untie_embeddings_and_output_weights);
    EXPECT_GT(ShardedSafetensors(tmp / "direct").shard_count(), 1u);
    // The exported config.json reads back to the same config.
    const HfCheckpoint back = read_hf_checkpoint(tmp / "direct");
    EXPECT_EQ(config_to_json(back.info.config), config_to_json(ck.info.config));
    // Through a native checkpoint.
    CheckpointState st;
    st.meta["model_type"] = "gpt";
    st.meta["config"] = config_to_json(model->config());
    const std::string native = save_checkpoint(tmp / "native", *model, nullptr, st);
    LoadedModel lm = load_model(native);
    write_hf_checkpoint(tmp / "via_native", model_params(lm.model->params()), ck.info, {ck.dtype, 0});
    expect_same_tensors(fixture(a), tmp / "via_native", !ck.info.config.untie_embeddings_and_output_weights);
  }
}

TEST(HfConvert, Gpt2WithoutTransformerPrefixImports) {
  // openai-community/gpt2 stores GPT2Model's names (wte.weight, h.0..., no "transformer." prefix).
  TempDir tmp;
  const std::string d = tmp / "gpt2_bare";
  fs::create_directories(d);
  fs::copy_file(fixture("gpt2") + "/config.json", d + "/config.json");
  fs::copy_file(fixture("gpt2") + "/logits.safetensors", d + "/logits.safetensors");
  SafetensorsFile src(fixture("gpt2") + "/model.safetensors");
  std::vector<SafetensorsEntry> bare;
  for (const auto& n : src.names()) bare.push_back({n.substr(std::string("transformer.").size()), src.get(n)});
  write_safetensors(d + "/model.safetensors", bare);
  const HfCheckpoint ck = read_hf_checkpoint(d);
  auto model = build(ck.info.config);
  load_params_into(ck.params, model->params(), d);
  EXPECT_LT(logits_error(*model, d), 1e-4);
}

TEST(HfConvert, LladaLayoutRoundTripsAndKeepsLogits) {
  TempDir tmp;
  const HfCheckpoint ck = read_hf_checkpoint(fixture("llama"));
  HfModelInfo info = ck.info;
  info.layout = HfLayout::LLaDA;
  info.diffusion = true;
  info.mask_token_id = 95;
  info.config.attention_mask = MaskType::None;
  write_hf_checkpoint(tmp / "llada", ck.params, info, {DType::F32, 0});
  const HfCheckpoint ll = read_hf_checkpoint(tmp / "llada");
  EXPECT_EQ(ll.info.layout, HfLayout::LLaDA);
  EXPECT_TRUE(ll.info.diffusion);
  EXPECT_EQ(ll.info.mask_token_id, 95);
  EXPECT_EQ(ll.info.config.attention_mask, MaskType::None);
  ShardedSafetensors st(tmp / "llada");
  EXPECT_TRUE(st.has("model.transformer.blocks.1.ff_proj.weight"));
  EXPECT_TRUE(st.has("model.transformer.ff_out.weight"));
  ASSERT_EQ(ll.params.size(), ck.params.size());
  for (size_t i = 0; i < ck.params.size(); ++i) {
    EXPECT_EQ(ll.params[i].name, ck.params[i].name);
    EXPECT_EQ(0, std::memcmp(ll.params[i].tensor.raw(), ck.params[i].tensor.raw(), ck.params[i].tensor.nbytes()));
  }
  auto model = build(ll.info.config);
  load_params_into(ll.params, model->params(), "llada");
  EXPECT_LT(logits_error(*model, fixture("llama")), 1e-4);
  // Back to llama layout: bit-exact with the original files.
  HfModelInfo back = ll.info;
  back.layout = HfLayout::Llama;
  back.diffusion = false;
  back.config.attention_mask = MaskType::Causal;
  write_hf_checkpoint(tmp / "llama", ll.params, back, {DType::F32, 0});
  expect_same_tensors(fixture("llama"), tmp / "llama", false);
}

TEST(HfConvert, DiffusionExportRecordsMaskAndBidirectional) {
  TempDir tmp;
  const HfCheckpoint ck = read_hf_checkpoint(fixture("qwen3"));
  HfModelInfo info = ck.info;
  info.diffusion = true;
  info.mask_token_id = 7;
  info.config.attention_mask = MaskType::None;
  write_hf_checkpoint(tmp / "d", ck.params, info, {DType::BF16, 0});
  const nlohmann::json j = nlohmann::json::parse(read_file(tmp / "d/config.json"));
  EXPECT_EQ(j["mask_token_id"], 7);
  EXPECT_EQ(j["is_causal"], false);
  EXPECT_EQ(j["architectures"][0], "Qwen3ForCausalLM");
  const HfCheckpoint back = read_hf_checkpoint(tmp / "d");
  EXPECT_TRUE(back.info.diffusion);
  EXPECT_EQ(back.info.mask_token_id, 7);
  EXPECT_EQ(back.info.config.attention_mask, MaskType::None);
  EXPECT_EQ(back.dtype, DType::BF16);
}

TEST(HfConvert, ExportRefusesWhatTheLayoutCannotHold) {
  const HfCheckpoint ck = read_hf_checkpoint(fixture("qwen3"));
  HfModelInfo info = ck.info;
  info.layout = HfLayout::Llama;
  expect_error([&] { hf_config_from_info(info, DType::F32); }, {"QK-norm", "qwen3"});
  info.layout = HfLayout::GPT2;
  expect_error([&] { hf_config_from_info(info, DType::F32); }, {"GPT-2"});
  EXPECT_EQ(default_hf_layout(ck.info.config), HfLayout::Qwen3);
  expect_error([] { hf_layout_from_name("mamba"); }, {"mamba"});
}

TEST(HfConvert, UnsupportedConfigFieldsAreErrors) {
  const nlohmann::json base = nlohmann::json::parse(read_file(fixture("qwen3") + "/config.json"));
  auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json j = base;
    j[key] = v;
    return j;
  };
  expect_error([&] { hf_config_to_info(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "cfg"); },
               {"cfg", "rope_scaling"});
  expect_error([&] { hf_config_to_info(with("use_sliding_window", true), "cfg"); }, {"cfg", "use_sliding_window"});
  expect_error([&] { hf_config_to_info(with("hidden_act", "gelu"), "cfg"); }, {"cfg", "hidden_act", "gelu"});
  expect_error([&] { hf_config_to_info(with("attention_bias", true), "cfg"); }, {"cfg", "attention_bias"});
  expect_error([&] { hf_config_to_info(with("model_type", "mamba").erase("architectures") , "cfg"); }, {"cfg"});
  nlohmann::json no_layers = base;
  no_layers.erase("num_hidden_layers");
  expect_error([&] { hf_config_to_info(no_layers, "cfg"); }, {"cfg", "num_hidden_layers"});
  nlohmann::json rp = base;
  rp["rope_parameters"]["rope_type"] = "linear";
  expect_error([&] { hf_config_to_info(rp, "cfg"); }, {"cfg", "rope_type", "linear"});
}

TEST(HfConvert, BadIndexFilesAreErrors) {
  const std::string src = fixture("llama");
  const nlohmann::json good = nlohmann::json::parse(read_file(src + "/model.safetensors.index.json"));
  auto with_index = [&](const std::string& text) {
    static int n = 0;
    TempDir* tmp = new TempDir();  // freed below via unique_ptr
    std::unique_ptr<TempDir> own(tmp);
    const std::string d = tmp->str() + "/c" + std::to_string(n++);
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(src))
      if (e.path().extension() == ".safetensors") fs::copy_file(e.path(), d + "/" + e.path().filename().string());
    std::ofstream(d + "/model.safetensors.index.json") << text;
    std::string msg;
    try {
      ShardedSafetensors s(d);
    } catch (const Error& e) {
      msg = e.what();
    }
    return msg;
  };
  EXPECT_NE(with_index("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(with_index("{\"metadata\": {}}").find("weight_map"), std::string::npos);
  nlohmann::json j = good;
  j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
  EXPECT_NE(with_index(j.dump()).find("does not exist"), std::string::npos);
  j = good;
  j["weight_map"]["model.norm.weight"] = "../x.safetensors";
  EXPECT_NE(with_index(j.dump()).find("not a file beside the index"), std::string::npos);
  j = good;
  j["weight_map"]["model.norm.weight"] = good["weight_map"]["lm_head.weight"];
  EXPECT_NE(with_index(j.dump()).find("does not hold it"), std::string::npos);
  j = good;
  j["weight_map"].erase("model.norm.weight");
  const std::string m = with_index(j.dump());
  EXPECT_NE(m.find("model.norm.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("does not list"), std::string::npos) << m;
  j = good;
  j["weight_map"]["model.norm.weight"] = 3;
  EXPECT_NE(with_index(j.dump()).find("not a file name"), std::string::npos);
  EXPECT_EQ(with_index(good.dump()), "");
}

TEST(HfConvert, ShardSizes) {
  EXPECT_EQ(parse_shard_size("5GB"), 5000000000LL);
  EXPECT_EQ(parse_shard_size("20KB"), 20000);
  EXPECT_EQ(parse_shard_size("1MiB"), 1048576);
  EXPECT_EQ(parse_shard_size("123"), 123);
  expect_error([] { parse_shard_size("5XB"); }, {"5XB"});
  expect_error([] { parse_shard_size("GB"); }, {"GB"});
}
