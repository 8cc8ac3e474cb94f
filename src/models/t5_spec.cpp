#include "models/t5_spec.h"

#include "core/error.h"

namespace megadlm {

const char* t5_feed_forward_name(T5FeedForward f) { return f == T5FeedForward::Relu ? "relu" : "gated-gelu"; }

T5FeedForward t5_feed_forward_from_name(const std::string& name, const std::string& where) {
  if (name == "relu") return T5FeedForward::Relu;
  if (name == "gated-gelu") return T5FeedForward::GatedGelu;
  fail(where, ": feed_forward_proj '", name, "' is not built for T5 (relu, gated-gelu)");
}

T5Options default_t5_options(const TransformerConfig& cfg) {
  T5Options o;
  o.num_decoder_layers = cfg.num_layers;
  o.scale_output = !cfg.untie_embeddings_and_output_weights;
  return o;
}

void validate_t5(const TransformerConfig& cfg, const T5Options& opt) {
  MEGADLM_CHECK(!cfg.moe.enabled(), "--model-type t5 is dense only: --num-experts is not available for it");
  MEGADLM_CHECK(cfg.normalization == NormKind::RMSNorm, "--model-type t5 needs --normalization RMSNorm (T5's scale-only norm)");
  MEGADLM_CHECK(!cfg.add_bias_linear && !cfg.add_qkv_bias, "--model-type t5 has no biases (--disable-bias-linear, no --add-qkv-bias)");
  MEGADLM_CHECK(cfg.position_embedding == PositionEmbedding::None,
                "--model-type t5 has no position embedding of its own (--position-embedding-type none): its "
                "positions are the relative attention bias");
  MEGADLM_CHECK(cfg.num_query_groups == cfg.num_attention_heads,
                "--model-type t5 has no grouped-query attention (--num-query-groups must equal --num-attention-heads)");
  MEGADLM_CHECK(!cfg.qk_layernorm, "--model-type t5 has no QK LayerNorm (--qk-layernorm)");
  MEGADLM_CHECK(opt.num_decoder_layers >= 1, "T5 needs at least one decoder layer, got ", opt.num_decoder_layers);
  MEGADLM_CHECK(opt.relative_attention_num_buckets >= 2, "T5's relative_attention_num_buckets must be at least 2, got ",
                opt.relative_attention_num_buckets);
  // The bidirectional encoder halves the buckets, and each half keeps num_buckets/4 exact distances
  // before the logarithmic ones, which then span (max_exact, max_distance].
  MEGADLM_CHECK(opt.relative_attention_max_distance > opt.relative_attention_num_buckets / 2,
                "T5's relative_attention_max_distance ", opt.relative_attention_max_distance,
                " must exceed half of relative_attention_num_buckets ", opt.relative_attention_num_buckets);
}

ModelSpec t5_model_spec(const TransformerConfig& cfg, const T5Options& opt) {
  validate_t5(cfg, opt);
  LayerSpec enc;
  enc.norm = NormSpec{NormKind::RMSNorm, NormPlacement::Pre};
  enc.self_attention = SelfAttentionSpec{MaskType::None, 0, false};
  enc.mlp = FeedForwardSpec{FeedForwardKind::Dense, cfg.activation, HostActivation::None};
  LayerSpec dec = enc;
  dec.self_attention.mask = MaskType::Causal;
  dec.cross_attention = CrossAttentionSpec{};
  ModelSpec m;
  m.embedding = EmbeddingSpec{false, 0, false, false};
  m.stacks.push_back(StackSpec{"encoder.layers", cfg.num_layers, [enc](int64_t) { return enc; }, true, "encoder.norm",
                               NormKind::RMSNorm});
  m.stacks.push_back(StackSpec{"decoder.layers", opt.num_decoder_layers, [dec](int64_t) { return dec; }, true,
                               "decoder.norm", NormKind::RMSNorm});
  m.heads.push_back(HeadSpec{HeadKind::LM, !cfg.untie_embeddings_and_output_weights});
  return m;
}

}  // namespace megadlm
