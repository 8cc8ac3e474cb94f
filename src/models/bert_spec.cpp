#include "models/bert_spec.h"

#include "core/error.h"

namespace megadlm {

LayerSpec bert_layer_spec(const TransformerConfig& cfg, const BertOptions& opt) {
  LayerSpec s;
  s.norm = NormSpec{cfg.normalization, opt.pre_norm ? NormPlacement::Pre : NormPlacement::Post};
  s.self_attention = SelfAttentionSpec{MaskType::None, 0, false};
  s.mlp = FeedForwardSpec{FeedForwardKind::Dense, Activation::Gelu,
                          opt.exact_gelu ? HostActivation::GeluErf : HostActivation::None};
  return s;
}

ModelSpec bert_model_spec(const TransformerConfig& cfg, const BertOptions& opt) {
  MEGADLM_CHECK(!cfg.moe.enabled(), "--model-type bert is dense only: --num-experts is not available for it");
  MEGADLM_CHECK(cfg.position_embedding == PositionEmbedding::LearnedAbsolute,
                "--model-type bert needs learned absolute positions (--position-embedding-type learned_absolute)");
  MEGADLM_CHECK(cfg.normalization == NormKind::LayerNorm, "--model-type bert needs --normalization LayerNorm");
  MEGADLM_CHECK(cfg.activation == Activation::Gelu, "--model-type bert needs the GELU activation (no --swiglu)");
  MEGADLM_CHECK(!cfg.untie_embeddings_and_output_weights,
                "--model-type bert ties the MLM decoder to the word embeddings: ",
                "no --untie-embeddings-and-output-weights");
  MEGADLM_CHECK(!cfg.qk_layernorm, "--model-type bert has no QK LayerNorm (--qk-layernorm)");
  MEGADLM_CHECK(opt.token_types >= 1, "BERT needs at least one token type, got ", opt.token_types);
  ModelSpec m;
  m.embedding = EmbeddingSpec{true, opt.token_types, false, !opt.pre_norm};
  const LayerSpec layer = bert_layer_spec(cfg, opt);
  m.stacks.push_back(StackSpec{"layers", cfg.num_layers, [layer](int64_t) { return layer; }, opt.pre_norm, "norm",
                               NormKind::LayerNorm});
  m.heads.push_back(HeadSpec{HeadKind::MLM, true});
  if (opt.binary_head) m.heads.push_back(HeadSpec{HeadKind::PoolerBinary, false});
  return m;
}

}  // namespace megadlm
