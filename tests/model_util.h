#pragma once
// Helpers for tests that run a LanguageModel directly.
#include <numeric>
#include <vector>

#include "models/language_model.h"

namespace megadlm::test {

// The samplers' tiny model (vocabulary 23, 2 layers, hidden 16): GPT-2 style, or LLaMA style (RoPE,
// RMSNorm, QK-norm, SwiGLU, GQA: every branch of the cached attention).
inline TransformerConfig tiny_sampler_config(bool llama) {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 32;
  c.vocab_size = 23;
  c.max_position_embeddings = 48;
  c.init_method_std = 0.4f;
  c.untie_embeddings_and_output_weights = true;
  if (llama) {
    c.position_embedding = PositionEmbedding::Rope;
    c.normalization = NormKind::RMSNorm;
    c.activation = Activation::SwiGLU;
    c.qk_layernorm = true;
    c.num_query_groups = 1;
    c.add_bias_linear = false;
  }
  return c;
}

// Logits [T, V] of one sequence at positions 0..T-1, copied out of the model's arena.
inline std::vector<float> sequence_logits(LanguageModel& m, const std::vector<int32_t>& seq) {
  std::vector<int32_t> pos(seq.size());
  std::iota(pos.begin(), pos.end(), 0);
  MicroBatch mb;
  mb.B = 1;
  mb.T = static_cast<int64_t>(seq.size());
  mb.tokens = seq;
  mb.positions = pos;
  const Tensor lg = m.forward_logits(mb);
  std::vector<float> out(lg.data<float>(), lg.data<float>() + lg.numel());
  m.arena().reset();
  return out;
}

}  // namespace megadlm::test
