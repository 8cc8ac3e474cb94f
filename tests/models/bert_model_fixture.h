#pragma once
// What the BertModel tests share (tests/models, tests/parallel): a small BERT config and a padded
// batch with MLM and binary labels.
#include "models/bert_model.h"

namespace megadlm::test {

// 2 layers, hidden 16, 4 heads, ffn 24, vocabulary 19 (odd: tp2 shards of 10 and 9 rows).
inline TransformerConfig bert_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 24;
  c.vocab_size = 19;
  c.max_position_embeddings = 8;
  c.normalization = NormKind::LayerNorm;
  c.norm_epsilon = 1e-12f;
  c.position_embedding = PositionEmbedding::LearnedAbsolute;
  return c;
}

// Two sequences of 5: the second padded after 3 tokens; MLM labels in both halves of the vocabulary.
inline BertBatch padded_batch() {
  BertBatch b;
  b.B = 2;
  b.T = 5;
  b.tokens = {2, 7, 11, 3, 18, 5, 9, 1, 0, 0};
  b.token_types = {0, 0, 1, 1, 1, 0, 1, 1, 0, 0};
  b.attention_mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  b.mlm_labels = {kMlmIgnore, 4, kMlmIgnore, 17, kMlmIgnore, kMlmIgnore, 6, kMlmIgnore, kMlmIgnore, kMlmIgnore};
  b.binary_labels = {1, 0};
  return b;
}

}  // namespace megadlm::test
