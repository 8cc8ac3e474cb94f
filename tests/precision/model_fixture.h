#pragma once
// A tiny LanguageModel and a fixed batch for the precision and recomputation tests, and a
// recomputation plan by its three flags' values (BERT's and T5's tests too).
#include <cmath>
#include <vector>

#include "models/language_model.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "test_util.h"

namespace megadlm::test {

inline RecomputeConfig recompute(RecomputeGranularity g, RecomputeMethod m = RecomputeMethod::Uniform, int64_t n = 1) {
  RecomputeConfig r;
  r.granularity = g;
  r.method = m;
  r.num_layers = n;
  return r;
}

// GPT-2 style (LayerNorm, GELU, biases, learned positions, tied) or LLaMA style (RMSNorm, SwiGLU,
// RoPE, GQA, QK-norm, untied), small enough for a test, with awkward sizes.
inline TransformerConfig tiny_model(bool llama, int64_t layers = 3) {
  TransformerConfig c;
  c.num_layers = layers;
  c.hidden_size = 48;
  c.num_attention_heads = 4;
  c.num_query_groups = llama ? 2 : 4;
  c.kv_channels = 12;
  c.ffn_hidden_size = llama ? 80 : 192;
  c.vocab_size = 96;
  c.max_position_embeddings = 64;
  c.init_method_std = 0.05f;
  if (llama) {
    c.normalization = NormKind::RMSNorm;
    c.activation = Activation::SwiGLU;
    c.add_bias_linear = false;
    c.position_embedding = PositionEmbedding::Rope;
    c.qk_layernorm = true;
    c.untie_embeddings_and_output_weights = true;
  }
  return c;
}

// B sequences of T tokens from a small repeating grammar (learnable), next-token targets.
struct TinyBatch {
  int64_t B, T;
  std::vector<int32_t> tokens, targets, positions;
  TinyBatch(int64_t b, int64_t t, int64_t V, uint64_t seed) : B(b), T(t) {
    const std::vector<float> r = random_vector(B * (T + 1), seed, 0.0f, 1.0f);
    std::vector<int32_t> seq(B * (T + 1));
    for (int64_t s = 0; s < B; ++s)
      for (int64_t i = 0; i <= T; ++i) {
        // Mostly a deterministic successor, sometimes a random token.
        const int64_t prev = i == 0 ? s * 7 % V : seq[s * (T + 1) + i - 1];
        seq[s * (T + 1) + i] = static_cast<int32_t>(r[s * (T + 1) + i] < 0.85f ? (prev * 5 + 3) % V
                                                                                : static_cast<int64_t>(r[s * (T + 1) + i] * 1000) % V);
      }
    for (int64_t s = 0; s < B; ++s)
      for (int64_t i = 0; i < T; ++i) {
        tokens.push_back(seq[s * (T + 1) + i]);
        targets.push_back(seq[s * (T + 1) + i + 1]);
        positions.push_back(static_cast<int32_t>(i));
      }
  }
  MicroBatch mb() const {
    MicroBatch m;
    m.B = B;
    m.T = T;
    m.tokens = tokens;
    m.positions = positions;
    m.targets = targets;
    return m;
  }
};

inline std::vector<float> grads_of(const LanguageModel& m) {
  return std::vector<float>(m.params().grads(), m.params().grads() + m.params().numel());
}

// ||a - b|| / ||b||
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

}  // namespace megadlm::test
