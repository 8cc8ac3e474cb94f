// Parity of the whole LanguageModel with an independent PyTorch implementation.
//
// tools/reference/model_parity.py builds three tiny models (GPT-2 style AR, LLaMA style AR, LLaMA style
// diffusion LM) with its own torch code, runs forward and backward in float64 on float32 parameters,
// and writes tests/models/fixtures/parity_*.safetensors (committed). Here each fixture's parameters
// are loaded into our model, one forward_backward runs in fp32, and the loss and every parameter
// gradient must match within 1e-4 relative (to each tensor's largest |gradient|).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "models/language_model.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"

using namespace megadlm;

namespace {

constexpr double kTol = 1e-4;

std::string fixture_path(const std::string& name) {
  return std::string(MEGADLM_SOURCE_DIR) + "/tests/models/fixtures/parity_" + name + ".safetensors";
}

// The TransformerConfig written by model_parity.py. Every key must be known here, so a field the
// script sets and the model would ignore cannot slip by.
TransformerConfig config_from_json(const nlohmann::json& j) {
  TransformerConfig c;
  std::set<std::string> seen;
  auto get = [&](const char* key) -> const nlohmann::json& {
    seen.insert(key);
    return j.at(key);
  };
  c.num_layers = get("num_layers").get<int64_t>();
  c.hidden_size = get("hidden_size").get<int64_t>();
  c.num_attention_heads = get("num_attention_heads").get<int64_t>();
  c.num_query_groups = get("num_query_groups").get<int64_t>();
  c.kv_channels = get("kv_channels").get<int64_t>();
  c.ffn_hidden_size = get("ffn_hidden_size").get<int64_t>();
  c.vocab_size = get("vocab_size").get<int64_t>();
  c.max_position_embeddings = get("max_position_embeddings").get<int64_t>();
  c.normalization = norm_kind_from_name(get("normalization").get<std::string>());
  c.norm_epsilon = get("norm_epsilon").get<float>();
  const std::string act = get("activation").get<std::string>();
  MEGADLM_CHECK(act == "gelu" || act == "swiglu", "fixture: unknown activation '", act, "'");
  c.activation = act == "gelu" ? Activation::Gelu : Activation::SwiGLU;
  c.add_bias_linear = get("add_bias_linear").get<bool>();
  c.add_qkv_bias = get("add_qkv_bias").get<bool>();
  const std::string pos = get("position_embedding").get<std::string>();
  if (pos == "learned_absolute") c.position_embedding = PositionEmbedding::LearnedAbsolute;
  else if (pos == "rope") c.position_embedding = PositionEmbedding::Rope;
  else if (pos == "none") c.position_embedding = PositionEmbedding::None;
  else fail("fixture: unknown position_embedding '", pos, "'");
  c.rotary_base = get("rotary_base").get<double>();
  c.qk_layernorm = get("qk_layernorm").get<bool>();
  c.untie_embeddings_and_output_weights = get("untie_embeddings_and_output_weights").get<bool>();
  c.init_method_std = get("init_method_std").get<float>();
  c.attention_mask = attention_mask_type_from_name(get("attention_mask").get<std::string>());
  c.attention_block_size = get("attention_block_size").get<int64_t>();
  for (auto it = j.begin(); it != j.end(); ++it)
    MEGADLM_CHECK(seen.count(it.key()), "fixture: config field '", it.key(), "' is not read by the test");
  return c;
}

// max |a - ref| / max |ref| over a tensor.
double rel_error(const float* a, const float* ref, int64_t n) {
  double scale = 0.0, err = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    scale = std::fmax(scale, std::fabs(ref[i]));
    const double e = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(e <= err)) err = e;  // NaN propagates
  }
  return err / (scale > 0.0 ? scale : 1.0);
}

double max_abs(const float* x, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}

void check_parity(const std::string& name, const std::string& expected_model_type) {
  const SafetensorsFile file(fixture_path(name));
  const auto& meta = file.metadata();
  ASSERT_TRUE(meta.count("config") && meta.count("model_type") && meta.count("B") && meta.count("T"))
      << file.path() << ": metadata lacks config, model_type, B or T";
  const TransformerConfig cfg = config_from_json(nlohmann::json::parse(meta.at("config")));
  const std::string model_type = meta.at("model_type");
  ASSERT_EQ(model_type, expected_model_type);
  const int64_t B = std::stoll(meta.at("B")), T = std::stoll(meta.at("T")), N = B * T;

  const ModelSpec spec = model_spec(model_type_from_name(model_type), cfg);
  if (model_type == "gpt") {
    ASSERT_EQ(cfg.attention_mask, MaskType::Causal);
  }
  LanguageModel model(cfg, spec, ParallelContext::single());
  ParamStore& params = model.params();

  // Every model parameter is in the fixture (value and gradient, same shape), and vice versa.
  for (const ParamInfo& p : params.infos()) {
    for (const char* kind : {"param.", "grad."}) {
      ASSERT_TRUE(file.has(kind + p.name)) << file.path() << " lacks " << kind << p.name;
      const Tensor t = file.get(kind + p.name);
      ASSERT_EQ(t.dtype(), DType::F32) << kind << p.name;
      ASSERT_EQ(t.shape(), p.shape) << kind << p.name << ": fixture " << t.shape().str() << ", model "
                                    << p.shape.str();
    }
    Tensor dst = params.value(params.find(p.name));
    file.read_into("param." + p.name, dst);
  }
  for (const std::string& n : file.names()) {
    for (const std::string kind : {"param.", "grad."}) {
      if (n.rfind(kind, 0) == 0) {
        EXPECT_GE(params.find(n.substr(kind.size())), 0) << file.path() << ": " << n << " is not a model parameter";
      }
    }
  }

  // The batch.
  const Tensor tokens = file.get("batch.tokens"), positions = file.get("batch.positions");
  const Tensor targets = file.get("batch.targets"), weights = file.get("batch.weights");
  for (const Tensor* t : {&tokens, &positions, &targets}) {
    ASSERT_EQ(t->dtype(), DType::I32);
    ASSERT_EQ(t->numel(), N);
  }
  ASSERT_EQ(weights.dtype(), DType::F32);
  ASSERT_EQ(weights.numel(), N);
  MicroBatch mb;
  mb.B = B;
  mb.T = T;
  mb.tokens.assign(tokens.data<int32_t>(), tokens.data<int32_t>() + N);
  mb.positions.assign(positions.data<int32_t>(), positions.data<int32_t>() + N);
  mb.targets.assign(targets.data<int32_t>(), targets.data<int32_t>() + N);
  mb.weights.assign(weights.data<float>(), weights.data<float>() + N);
  const Tensor ref_loss = file.get("loss");
  ASSERT_EQ(ref_loss.numel(), 1);
  const double expected = ref_loss.data<float>()[0];

  params.zero_grads();
  const double loss = model.forward_backward(mb, 1.0f);
  EXPECT_NEAR(loss, expected, kTol * std::fabs(expected)) << name << ": loss";
  // Some gradients are zero in exact arithmetic (a k_proj bias shifts every score of a query row
  // alike, and softmax ignores that): there the reference holds ~1e-17 and ours fp32 rounding noise,
  // so such a tensor must only be tiny against the largest gradient of the model.
  double model_scale = 0.0;
  for (const ParamInfo& p : params.infos())
    model_scale = std::fmax(model_scale, max_abs(file.get("grad." + p.name).data<float>(), p.shape.numel()));
  ASSERT_GT(model_scale, 1e-3) << name << ": the reference gradients are all (nearly) zero";
  const double zero = 1e-6 * model_scale;
  for (const ParamInfo& p : params.infos()) {
    const float* ref = file.get("grad." + p.name).data<float>();
    const float* ours = params.grads() + p.offset;
    if (max_abs(ref, p.shape.numel()) < zero) {
      EXPECT_LT(max_abs(ours, p.shape.numel()), zero) << name << ": gradient of " << p.name << " should be 0";
    } else {
      EXPECT_LT(rel_error(ours, ref, p.shape.numel()), kTol) << name << ": gradient of " << p.name;
    }
  }
  EXPECT_EQ(model.forward_loss(mb), loss) << name << ": forward_loss differs from forward_backward's loss";
}

TEST(Parity, Gpt2StyleAutoregressive) { check_parity("gpt2", "gpt"); }
TEST(Parity, LlamaStyleAutoregressive) { check_parity("llama", "gpt"); }
TEST(Parity, LlamaStyleDiffusion) { check_parity("dlm", "difflm"); }

}  // namespace
