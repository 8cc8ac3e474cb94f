// HuggingFace BERT <-> ours (checkpoint/hf_bert.h). The fixtures (tools/reference/make_bert_fixture.py:
// a tiny random BertForPreTraining with the erf GELU, a BertForMaskedLM with the tanh GELU and 3 token
// types) are imported and must give transformers' float64 logits within 1e-5 relative (MLM logits at
// the unpadded positions, NSP logits); HF -> ours -> HF reproduces every tensor bit for bit, directly
// and through convert_checkpoint's native checkpoint; what the layout cannot hold is an Error naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../robustness/child_process.h"
#include "hf_fixture_util.h"
#include "checkpoint/hf_bert.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/file_io.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::edited_copy;
using test::expect_error_with;
using test::expect_same_tensors;
using test::read_json;
std::string fixture(const std::string& name) { return test::hf_fixture(name); }
using test::TempDir;

std::unique_ptr<BertModel> import(const std::string& dir) {
  const HfBertCheckpoint ck = read_hf_bert_checkpoint(dir);
  auto m = std::make_unique<BertModel>(ck.info.config, bert_model_spec(ck.info.config, ck.info.options),
                                       ParallelContext::single());
  load_params_into(ck.params, m->params(), dir);
  return m;
}

std::vector<int32_t> ints(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

struct Errors {
  double mlm = 0, nsp = 0;
};

// Our logits of the fixture's inputs against transformers': the MLM logits of the unpadded rows (a
// padded row's output is not BERT's: bert_model.h), the NSP logits when the fixture has them.
Errors logits_errors(BertModel& m, const std::string& dir) {
  SafetensorsFile ref(dir + "/logits.safetensors");
  BertBatch b;
  const Tensor ids = ref.get("input_ids");
  b.B = ids.size(0);
  b.T = ids.size(1);
  b.tokens = ints(ids);
  b.token_types = ints(ref.get("token_type_ids"));
  b.attention_mask = ints(ref.get("attention_mask"));
  const BertModel::Logits got = m.forward_logits(b);
  const Tensor want = ref.get("mlm_logits");
  const int64_t V = want.size(2);
  std::vector<float> ours;
  std::vector<double> theirs;
  for (int64_t n = 0; n < b.B * b.T; ++n) {
    if (b.attention_mask[n] == 0) continue;
    for (int64_t v = 0; v < V; ++v) {
      ours.push_back(got.mlm.data<float>()[n * V + v]);
      theirs.push_back(want.data<float>()[n * V + v]);
    }
  }
  Errors e;
  e.mlm = test::max_rel_error(ours, theirs);
  if (ref.has("nsp_logits") && m.has_binary_head()) {
    const Tensor w = ref.get("nsp_logits");
    const std::vector<double> wd(w.data<float>(), w.data<float>() + w.numel());
    e.nsp = test::max_rel_error(got.binary.data<float>(), wd.data(), w.numel());
  }
  return e;
}

TEST(HfBert, ImportedFixturesGiveTransformersLogits) {
  for (const char* name : {"hf_bert", "hf_bert_mlm"}) {
    auto m = import(fixture(name));
    const Errors e = logits_errors(*m, fixture(name));
    EXPECT_LT(e.mlm, 1e-5) << name << ": MLM logits differ from transformers by " << e.mlm;
    EXPECT_LT(e.nsp, 1e-5) << name << ": NSP logits differ from transformers by " << e.nsp;
    std::printf("  %-12s max relative error vs transformers: MLM %.2e, NSP %.2e\n", name, e.mlm, e.nsp);
  }
  EXPECT_TRUE(import(fixture("hf_bert"))->exact_gelu());
  EXPECT_TRUE(import(fixture("hf_bert"))->has_binary_head());
  EXPECT_FALSE(import(fixture("hf_bert_mlm"))->exact_gelu());
  EXPECT_FALSE(import(fixture("hf_bert_mlm"))->has_binary_head());
  EXPECT_EQ(import(fixture("hf_bert_mlm"))->token_types(), 3);
}

TEST(HfBert, RoundTripReproducesEveryTensorBitForBit) {
  TempDir tmp;
  for (const char* name : {"hf_bert", "hf_bert_mlm"}) {
    auto m = import(fixture(name));
    write_hf_bert_checkpoint(tmp / name, model_params(m->params()), hf_bert_info(*m), HfWriteOptions{});
    expect_same_tensors(fixture(name), tmp / name);
    test::expect_same_config(fixture(name), tmp / name,
                             {"architectures", "hidden_act", "type_vocab_size", "vocab_size", "intermediate_size",
                              "max_position_embeddings", "layer_norm_eps"});
    // And back: the same parameters, bit for bit.
    test::expect_same_params(import(tmp / name)->params(), m->params());
  }
}

TEST(HfBert, ConvertCheckpointRoundTripsThroughTheNativeCheckpoint) {
  MEGADLM_REQUIRE_BINARY("convert_checkpoint");
  TempDir tmp;
  for (const char* name : {"hf_bert", "hf_bert_mlm"}) {
    const auto [native, out] = test::convert_through_native(tmp, name, {"--layout", "bert"});
    if (HasFailure()) return;
    expect_same_tensors(fixture(name), out);
    const Errors e = logits_errors(*import(out), fixture(name));
    EXPECT_LT(e.mlm, 1e-5);
    EXPECT_LT(e.nsp, 1e-5);
    const nlohmann::json state = read_json(native + "/iter_0000000/state.json");
    EXPECT_EQ(state["meta"]["model_type"], "bert");
    EXPECT_EQ(state["meta"]["hf"]["layout"], "bert");
  }
}

TEST(HfBert, WhatTheLayoutCannotHoldIsAnErrorNamingIt) {
  TempDir tmp;
  expect_error_with([&] { read_hf_bert_checkpoint(edited_copy(tmp, "hf_bert", [](auto& j) { j["hidden_act"] = "relu"; })); },
                    "hidden_act 'relu' is not built");
  fs::remove_all(tmp / "hf_bert");
  expect_error_with(
      [&] { read_hf_bert_checkpoint(edited_copy(tmp, "hf_bert", [](auto& j) { j["architectures"] = {"BertModel"}; })); },
      "architecture 'BertModel' is not converted");
  fs::remove_all(tmp / "hf_bert");
  expect_error_with([&] {
    read_hf_bert_checkpoint(edited_copy(tmp, "hf_bert", [](auto& j) { j["position_embedding_type"] = "relative_key"; }));
  }, "position_embedding_type 'relative_key' is not built");
  fs::remove_all(tmp / "hf_bert");
  // config.json implies 3 token types; the file has 2 rows.
  expect_error_with([&] { read_hf_bert_checkpoint(edited_copy(tmp, "hf_bert", [](auto& j) { j["type_vocab_size"] = 3; })); },
                    "bert.embeddings.token_type_embeddings.weight' has shape [2, 32], but config.json implies [3, 32]");
  fs::remove_all(tmp / "hf_bert");
  // BertForMaskedLM reads a pretraining file, its pooler and NSP head unused; the other way a tensor is missing.
  auto mlm = import(edited_copy(tmp, "hf_bert", [](auto& j) { j["architectures"] = {"BertForMaskedLM"}; }));
  EXPECT_FALSE(mlm->has_binary_head());
  EXPECT_LT(logits_errors(*mlm, fixture("hf_bert")).mlm, 1e-5);
  expect_error_with([&] {
    read_hf_bert_checkpoint(edited_copy(tmp, "hf_bert_mlm", [](auto& j) { j["architectures"] = {"BertForPreTraining"}; }));
  }, "tensor 'bert.pooler.dense.weight' (for our pooler.dense.weight) is missing");
  // Our pre-norm BERT has no HuggingFace form.
  TransformerConfig cfg = import(fixture("hf_bert"))->config();
  BertOptions pre;
  pre.pre_norm = true;
  BertModel pre_model(cfg, bert_model_spec(cfg, pre), ParallelContext::single());
  expect_error_with([&] { write_hf_bert_checkpoint(tmp / "pre", model_params(pre_model.params()), hf_bert_info(pre_model), {}); },
                    "HuggingFace's BERT is post-norm");
  EXPECT_FALSE(fs::exists(tmp / "pre" + "/config.json"));
}

TEST(HfBert, AnUntiedDecoderOrAnUnknownTensorIsRefused) {
  TempDir tmp;
  // The fixture's tensors plus a decoder that differs from the word embeddings, then plus a stray tensor.
  ShardedSafetensors src(fixture("hf_bert"));
  std::vector<SafetensorsEntry> t;
  for (const auto& n : src.names()) t.push_back({n, src.get(n)});
  Tensor decoder = Tensor::zeros(src.get("bert.embeddings.word_embeddings.weight").shape(), DType::F32);
  auto write = [&](const std::vector<SafetensorsEntry>& tensors) {
    fs::remove_all(tmp / "d");
    fs::create_directories(tmp / "d");
    fs::copy_file(fixture("hf_bert") + "/config.json", tmp / "d/config.json");
    write_safetensors(tmp / "d/model.safetensors", tensors, {});
    return tmp / "d";
  };
  auto with_decoder = t;
  with_decoder.push_back({"cls.predictions.decoder.weight", decoder});
  expect_error_with([&] { read_hf_bert_checkpoint(write(with_decoder)); },
                    "'cls.predictions.decoder.weight' differs from 'bert.embeddings.word_embeddings.weight'");
  auto stray = t;
  stray.push_back({"bert.encoder.layer.2.output.dense.bias", Tensor::zeros({32}, DType::F32)});
  expect_error_with([&] { read_hf_bert_checkpoint(write(stray)); },
                    "tensor 'bert.encoder.layer.2.output.dense.bias' is not used by the bert layout");
  // The tied decoder stored equal to the embeddings is fine.
  auto tied = t;
  tied.push_back({"cls.predictions.decoder.weight", src.get("bert.embeddings.word_embeddings.weight")});
  EXPECT_NO_THROW(read_hf_bert_checkpoint(write(tied)));
}

}  // namespace
