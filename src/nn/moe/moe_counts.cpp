#include "nn/moe/moe_counts.h"

namespace megadlm {

FfnCounts ffn_counts(const TransformerConfig& c, int64_t layer) {
  const int64_t C = c.hidden_size;
  const bool bias = c.add_bias_linear;
  const bool swiglu = c.activation == Activation::SwiGLU;
  // One MLP of hidden size F: fc1 [F1, C] (+ b [F1]), fc2 [C, F] (+ b [C]).
  auto mlp_params = [&](int64_t F) {
    const int64_t F1 = swiglu ? 2 * F : F;
    return C * F1 + F * C + (bias ? F1 + C : 0);
  };
  auto mlp_matrix = [&](int64_t F) { return C * (swiglu ? 2 * F : F) + F * C; };
  auto mlp_saved = [&](int64_t F) { return static_cast<double>((swiglu ? 2 * F : F) + F); };
  FfnCounts r;
  const MoEConfig& m = c.moe;
  if (!m.is_moe_layer(layer)) {
    r.params = mlp_params(c.ffn_hidden_size);
    r.active_matrix = mlp_matrix(c.ffn_hidden_size);
    r.saved_per_token = mlp_saved(c.ffn_hidden_size);
    return r;
  }
  const int64_t E = m.num_experts, k = m.topk, F = m.ffn_hidden_size > 0 ? m.ffn_hidden_size : c.ffn_hidden_size;
  r.params = E * C + E * mlp_params(F);
  r.active_matrix = E * C + k * mlp_matrix(F);
  // logits and scores [E]; per routed copy: the dispatched row, fc1 output, activation, expert output.
  r.saved_per_token = 2.0 * static_cast<double>(E) + static_cast<double>(k) * (2.0 * static_cast<double>(C) + mlp_saved(F));
  if (m.shared_expert_size > 0) {
    r.params += mlp_params(m.shared_expert_size);
    r.active_matrix += mlp_matrix(m.shared_expert_size);
    r.saved_per_token += mlp_saved(m.shared_expert_size) + static_cast<double>(C);
  }
  return r;
}

}  // namespace megadlm
