// The block diffusion (BD3-LM) loss against an independent PyTorch implementation.
//
// tools/reference/bd3_reference.py takes a tiny LLaMA-style model of our architecture with a
// block_causal mask, fixed clean tokens, fixed noise levels per block and fixed mask decisions, and
// computes the BD3 loss one block at a time (block b read after the clean blocks before it, a forward
// per block, in float64); tests/models/fixtures/bd3_parity.safetensors holds its parameters, the draws,
// the loss and every gradient. Here the objective's entry point block_diffusion_batch builds our
// vectorised [x_t ; x_0] micro-batch from the same draws and one fp32 forward_backward must give the
// loss within 1e-5 relative and every gradient within 1e-4 of each tensor's largest.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "models/language_model.h"
#include "models/model_spec.h"
#include "objectives/block_diffusion.h"

using namespace megadlm;

namespace {

// The fields of model_parity.py's configuration that the BD3 fixture sets.
TransformerConfig fixture_config(const nlohmann::json& j) {
  TransformerConfig c;
  c.num_layers = j.at("num_layers").get<int64_t>();
  c.hidden_size = j.at("hidden_size").get<int64_t>();
  c.num_attention_heads = j.at("num_attention_heads").get<int64_t>();
  c.num_query_groups = j.at("num_query_groups").get<int64_t>();
  c.kv_channels = j.at("kv_channels").get<int64_t>();
  c.ffn_hidden_size = j.at("ffn_hidden_size").get<int64_t>();
  c.vocab_size = j.at("vocab_size").get<int64_t>();
  c.max_position_embeddings = j.at("max_position_embeddings").get<int64_t>();
  c.normalization = norm_kind_from_name(j.at("normalization").get<std::string>());
  c.norm_epsilon = j.at("norm_epsilon").get<float>();
  c.activation = j.at("activation").get<std::string>() == "swiglu" ? Activation::SwiGLU : Activation::Gelu;
  c.add_bias_linear = j.at("add_bias_linear").get<bool>();
  c.add_qkv_bias = j.at("add_qkv_bias").get<bool>();
  EXPECT_EQ(j.at("position_embedding").get<std::string>(), "rope");
  c.position_embedding = PositionEmbedding::Rope;
  c.rotary_base = j.at("rotary_base").get<double>();
  c.qk_layernorm = j.at("qk_layernorm").get<bool>();
  c.untie_embeddings_and_output_weights = j.at("untie_embeddings_and_output_weights").get<bool>();
  c.attention_mask = attention_mask_type_from_name(j.at("attention_mask").get<std::string>());
  c.attention_block_size = j.at("attention_block_size").get<int64_t>();
  c.block_diffusion = true;
  return c;
}

double rel_error(const float* a, const float* ref, int64_t n) {
  double scale = 0.0, err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    scale = std::fmax(scale, std::fabs(ref[i]));
    const double e = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(e <= err)) err = e;  // NaN propagates
  }
  return err / (scale > 0.0 ? scale : 1.0);
}

}  // namespace

TEST(Bd3Parity, LossAndGradientsMatchTheSequentialPyTorchReference) {
  const SafetensorsFile file(std::string(MEGADLM_SOURCE_DIR) + "/tests/models/fixtures/bd3_parity.safetensors");
  const auto& meta = file.metadata();
  const TransformerConfig cfg = fixture_config(nlohmann::json::parse(meta.at("config")));
  ASSERT_EQ(cfg.attention_mask, MaskType::BlockCausal);
  const int64_t B = std::stoll(meta.at("B")), T = std::stoll(meta.at("T")), L = std::stoll(meta.at("block_length"));
  ASSERT_EQ(cfg.attention_block_size, L);

  LanguageModel model(cfg, model_spec(ModelType::DiffLM, cfg), ParallelContext::single());
  ParamStore& params = model.params();
  for (const ParamInfo& p : params.infos()) {
    ASSERT_TRUE(file.has("param." + p.name) && file.has("grad." + p.name)) << p.name;
    Tensor dst = params.value(params.find(p.name));
    file.read_into("param." + p.name, dst);
  }

  // The reference's draws, fed to the objective's entry point.
  const Tensor x0 = file.get("bd3.x0"), tt = file.get("bd3.t"), mk = file.get("bd3.masked");
  ASSERT_EQ(x0.numel(), B * T);
  ASSERT_EQ(tt.numel(), B * (T / L));
  ASSERT_EQ(tt.dtype(), DType::F32);
  const std::vector<double> t(tt.data<float>(), tt.data<float>() + tt.numel());
  std::vector<uint8_t> masked(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) masked[static_cast<size_t>(i)] = mk.data<int32_t>()[i] != 0;
  BlockDiffusionOptions opt;
  opt.mask_token = std::stoi(meta.at("mask_token"));
  opt.block_length = L;
  MicroBatch mb;
  block_diffusion_batch(opt, x0.data<int32_t>(), B, T, T, t, masked, 1.0f, mb);
  ASSERT_EQ(mb.T, 2 * T);
  ASSERT_EQ(mb.block_diffusion, L);

  params.zero_grads();
  const double loss = model.forward_backward(mb, 1.0f);
  const double expected = file.get("loss").data<float>()[0];
  EXPECT_NEAR(loss, expected, 1e-5 * std::fabs(expected));
  for (const ParamInfo& p : params.infos())
    EXPECT_LT(rel_error(params.grads() + p.offset, file.get("grad." + p.name).data<float>(), p.shape.numel()), 1e-4)
        << "gradient of " << p.name;
}
