// An encoder-decoder model built from specs in a test: the example of "Adding a model family" in
// docs/ARCHITECTURE.md. Two bidirectional encoder layers; two causal decoder layers whose
// cross-attention reads the encoder's output; one token embedding for both stacks, tied to the LM head.
// Its spec is written here as a family's spec file would write it, and its model class composes the
// nn building blocks as LanguageModel does: every gradient (both stacks, the cross-attention, the shared
// embedding) is checked by finite differences, with pre-norm (T5) and post-norm (BERT) layers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grad_check.h"
#include "models/model_spec.h"
#include "nn/embedding.h"
#include "nn/lm_head.h"
#include "nn/norm.h"
#include "nn/transformer_block.h"
#include "test_util.h"

namespace megadlm {
namespace {

using namespace test::grad_check;

// ---- the family's spec: what a models/<family>_spec.cpp holds ----------------------------------------
ModelSpec encoder_decoder_spec(const TransformerConfig& cfg, NormPlacement placement) {
  LayerSpec encoder_layer;
  encoder_layer.norm = NormSpec{cfg.normalization, placement};
  encoder_layer.self_attention = SelfAttentionSpec{MaskType::None, 0, false};
  encoder_layer.mlp = FeedForwardSpec{FeedForwardKind::Dense, cfg.activation};
  LayerSpec decoder_layer = encoder_layer;
  decoder_layer.self_attention.mask = MaskType::Causal;
  decoder_layer.cross_attention = CrossAttentionSpec{};
  // A pre-norm stack ends in a norm of its own; a post-norm stack's output is normalised already.
  const bool final_norm = placement == NormPlacement::Pre;
  ModelSpec m;
  m.embedding = EmbeddingSpec{true, 0, false};
  m.stacks.push_back(StackSpec{"encoder.layers", 2, [=](int64_t) { return encoder_layer; }, final_norm, "encoder.norm",
                               cfg.normalization});
  m.stacks.push_back(StackSpec{"decoder.layers", 2, [=](int64_t) { return decoder_layer; }, final_norm, "decoder.norm",
                               cfg.normalization});
  m.heads.push_back(HeadSpec{HeadKind::LM, true});
  return m;
}

// ---- the family's model: the building blocks composed as the spec says ------------------------------
struct Pair {  // one batch: source ids [B, S], target ids [B, T] and the labels of the target positions
  int64_t B = 0, S = 0, T = 0;
  std::vector<int32_t> source, target, labels, source_pos, target_pos;
};

class EncoderDecoderToy {
 public:
  EncoderDecoderToy(ParamStore& store, const TransformerConfig& cfg, const ModelSpec& spec)
      : ctx_(ParallelContext::single()) {
    const StackSpec& enc = spec.stacks.at(0);
    const StackSpec& dec = spec.stacks.at(1);
    embedding_ = Embedding(store, ctx_, cfg, spec.embedding);
    encoder_ = TransformerBlock(store, ctx_, cfg, enc, LayerRange{0, enc.num_layers});
    if (enc.final_norm) encoder_norm_ = make_norm(store, ctx_, enc.final_norm_name, enc.final_norm_kind, cfg);
    decoder_ = TransformerBlock(store, ctx_, cfg, dec, LayerRange{0, dec.num_layers});
    if (dec.final_norm) decoder_norm_ = make_norm(store, ctx_, dec.final_norm_name, dec.final_norm_kind, cfg);
    head_ = LMHead(store, cfg, embedding_.word_embeddings_id(), &ctx_);  // tied: spec.heads[0].tied
    final_norms_ = enc.final_norm;
  }

  // sum of the target positions' cross-entropy; with backward, every parameter's gradient accumulated.
  double run(Arena& arena, const Pair& p, bool backward) {
    const BatchInfo src{p.B, p.S, p.source_pos.data(), nullptr};
    Tensor memory = encoder_.forward(arena, embedding_.forward(arena, p.source.data(), src), src);
    if (final_norms_) memory = encoder_norm_.forward(arena, memory);
    Tensor dmemory = arena.zeros(memory.shape());
    BatchInfo tgt{p.B, p.T, p.target_pos.data(), nullptr};
    tgt.memory = memory.data<float>();
    tgt.memory_grad = dmemory.data<float>();
    tgt.memory_T = p.S;
    // The shared table's second forward: its saved ids are now the decoder's.
    Tensor h = decoder_.forward(arena, embedding_.forward(arena, p.target.data(), tgt), tgt);
    if (final_norms_) h = decoder_norm_.forward(arena, h);
    if (!backward) return head_.loss(arena, h, p.labels.data(), nullptr, nullptr);
    Tensor dh = arena.tensor(h.shape());
    const double loss = head_.loss_and_backward(arena, h, p.labels.data(), nullptr, 1.0f, dh, nullptr);
    // The decoder: its cross-attention layers add the memory's gradient to dmemory.
    Tensor a = arena.tensor(h.shape()), b = arena.tensor(h.shape());
    if (final_norms_) decoder_norm_.backward(dh, a);
    else a.copy_from(dh);
    Tensor *dy = &a, *dx = &b;
    decoder_.backward(arena, tgt, dy, dx, [](int64_t) {});
    embedding_.backward(*dy);
    // The encoder from the memory's gradient, and the shared table's share of it.
    Tensor c = arena.tensor(memory.shape()), d = arena.tensor(memory.shape());
    if (final_norms_) encoder_norm_.backward(dmemory, c);
    else c.copy_from(dmemory);
    dy = &c;
    dx = &d;
    encoder_.backward(arena, src, dy, dx, [](int64_t) {});
    embedding_.forward(arena, p.source.data(), src);  // its saved ids back to the encoder's
    embedding_.backward(*dy);
    return loss;
  }

 private:
  ParallelContext ctx_;
  Embedding embedding_;
  TransformerBlock encoder_, decoder_;
  Norm encoder_norm_, decoder_norm_;
  LMHead head_;
  bool final_norms_ = true;
};

TransformerConfig toy_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.kv_channels = 4;
  c.ffn_hidden_size = 24;
  c.vocab_size = 23;
  c.max_position_embeddings = 16;
  c.normalization = NormKind::RMSNorm;
  c.activation = Activation::Gelu;
  c.position_embedding = PositionEmbedding::LearnedAbsolute;
  return c;
}

Pair toy_pair() {
  Pair p;
  p.B = 2;
  p.S = 5;
  p.T = 4;
  const std::vector<float> r = test::random_vector(p.B * (p.S + 2 * p.T), 81, 0.0f, 1.0f);
  size_t k = 0;
  auto id = [&] { return static_cast<int32_t>(r[k++] * 22.999f); };
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t s = 0; s < p.S; ++s) p.source.push_back(id()), p.source_pos.push_back(static_cast<int32_t>(s));
    for (int64_t t = 0; t < p.T; ++t) {
      p.target.push_back(id());
      p.target_pos.push_back(static_cast<int32_t>(t));
      p.labels.push_back(t == 1 ? kIgnoreIndex : id());  // one position without a loss
    }
  }
  return p;
}

class EncoderDecoderFromSpecs : public ::testing::TestWithParam<NormPlacement> {};

TEST_P(EncoderDecoderFromSpecs, TheSpecBuildsCrossAttentionInTheDecoderOnly) {
  const TransformerConfig cfg = toy_config();
  ParamStore store;
  EncoderDecoderToy toy(store, cfg, encoder_decoder_spec(cfg, GetParam()));
  store.finalize();
  for (int l = 0; l < 2; ++l) {
    const std::string d = "decoder.layers." + std::to_string(l), e = "encoder.layers." + std::to_string(l);
    EXPECT_GE(store.find(d + ".cross_attn.q_proj.weight"), 0);
    EXPECT_GE(store.find(d + ".pre_cross_attn_layernorm.weight"), 0);
    EXPECT_EQ(store.find(e + ".cross_attn.q_proj.weight"), -1);
    EXPECT_GE(store.find(e + ".self_attn.q_proj.weight"), 0);
  }
  EXPECT_EQ(store.find("lm_head.weight"), -1) << "the head is tied to the shared embedding";
  EXPECT_EQ(store.find("encoder.norm.weight") >= 0, GetParam() == NormPlacement::Pre);
}

TEST_P(EncoderDecoderFromSpecs, GradientsMatchFiniteDifferences) {
  const TransformerConfig cfg = toy_config();
  ParamStore store;
  EncoderDecoderToy toy(store, cfg, encoder_decoder_spec(cfg, GetParam()));
  store.finalize();
  randomize(store, 82);
  const Pair pair = toy_pair();
  Arena arena;
  check_gradients(GetParam() == NormPlacement::Pre ? "encoder-decoder, pre-norm" : "encoder-decoder, post-norm", store,
                  arena, {}, {0}, [&](Arena& a, const Tensor&, Tensor* dx) { return toy.run(a, pair, dx != nullptr); },
                  /*max_samples=*/24);
}

INSTANTIATE_TEST_SUITE_P(Placements, EncoderDecoderFromSpecs,
                         ::testing::Values(NormPlacement::Pre, NormPlacement::Post),
                         [](const auto& info) { return info.param == NormPlacement::Pre ? "PreNorm" : "PostNorm"; });

}  // namespace
}  // namespace megadlm
