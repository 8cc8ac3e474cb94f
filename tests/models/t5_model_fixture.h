#pragma once
// What the T5Model tests share (tests/models, tests/parallel): a small T5 config (inner size != hidden,
// an odd vocabulary: tp2 shards of 12 and 11 rows), its options (v1.0: ReLU, tied and scaled output;
// v1.1: gated GELU, untied) and a padded batch with an unlabelled row.
#include <vector>

#include "kernels/types.h"
#include "models/t5_model.h"
#include "test_util.h"

namespace megadlm::test {

inline TransformerConfig t5_config(bool v11) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 6;  // inner size 24 != hidden 16, as HF's d_kv allows
  c.ffn_hidden_size = 20;
  c.vocab_size = 23;
  c.normalization = NormKind::RMSNorm;
  c.norm_epsilon = 1e-6f;
  c.add_bias_linear = false;
  c.position_embedding = PositionEmbedding::None;
  c.untie_embeddings_and_output_weights = v11;
  return c;
}

inline T5Options t5_options(const TransformerConfig& c, bool v11) {
  T5Options o = default_t5_options(c);
  o.num_decoder_layers = 3;  // HF's num_decoder_layers may differ from num_layers
  o.relative_attention_num_buckets = 8;
  o.relative_attention_max_distance = 12;
  o.feed_forward = v11 ? T5FeedForward::GatedGelu : T5FeedForward::Relu;
  return o;
}

// Two sequences: 7 encoder rows (the second padded after 4), 5 decoder rows (the second padded after
// 4), one labelled row without a loss.
inline T5Batch t5_batch() {
  T5Batch b;
  b.B = 2;
  b.S = 7;
  b.T = 5;
  const std::vector<float> r = test::random_vector(b.B * (b.S + 2 * b.T), 91, 0.0f, 1.0f);
  size_t k = 0;
  auto id = [&] { return static_cast<int32_t>(r[k++] * 22.999f); };
  for (int64_t i = 0; i < b.B * b.S; ++i) {
    b.encoder_tokens.push_back(id());
    b.encoder_mask.push_back(i >= b.S + 4 ? 0 : 1);
  }
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    b.decoder_tokens.push_back(id());
    b.decoder_mask.push_back(i == 2 * b.T - 1 ? 0 : 1);
    b.labels.push_back(i == 2 || i == 2 * b.T - 1 ? kIgnoreIndex : id());
  }
  return b;
}

}  // namespace megadlm::test
