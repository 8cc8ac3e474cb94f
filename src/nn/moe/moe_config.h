#pragma once
// Mixture-of-Experts settings (Megatron's num_moe_experts / moe_* fields of TransformerConfig).
// A layer chosen by layer_freq replaces its dense MLP with router -> dispatch -> experts -> combine.
#include <cstdint>
#include <string>
#include <vector>

namespace megadlm {

enum class MoERouterType : uint8_t { TopK, ExpertChoice };      // token choice, or each expert picks tokens
enum class MoEScoreFunction : uint8_t { Softmax, Sigmoid };
enum class MoELoadBalancing : uint8_t { AuxLoss, SeqAuxLoss, None };
enum class MoEDropPolicy : uint8_t { Probs, Position };

struct MoEConfig {
  int64_t num_experts = 0;             // E; 0 = dense model
  int64_t layer_freq = 1;              // every layer_freq-th layer (0, N, 2N, ...) is MoE ...
  std::vector<uint8_t> layer_pattern;  // ... unless a 0/1 pattern per layer is given
  int64_t topk = 2;                    // k experts per token (expert choice: capacity = N k / E)
  MoERouterType router_type = MoERouterType::TopK;
  MoEScoreFunction score_function = MoEScoreFunction::Softmax;
  bool pre_softmax = false;            // softmax over all experts before the top-k
  MoELoadBalancing load_balancing = MoELoadBalancing::AuxLoss;
  float aux_loss_coeff = 0.0f;
  float z_loss_coeff = 0.0f;
  double capacity_factor = 0.0;        // <= 0: no capacity limit (token choice)
  MoEDropPolicy drop_policy = MoEDropPolicy::Probs;
  bool pad_to_capacity = false;
  int64_t ffn_hidden_size = 0;         // per-expert F (0 = the dense --ffn-hidden-size)
  int64_t shared_expert_size = 0;      // shared expert F (0 = none)
  bool grouped_gemm = false;

  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const {
    if (!enabled()) return false;
    if (!layer_pattern.empty()) return layer < static_cast<int64_t>(layer_pattern.size()) && layer_pattern[layer] != 0;
    return layer_freq > 0 && layer % layer_freq == 0;
  }
};

const char* moe_router_type_name(MoERouterType t);
const char* moe_score_function_name(MoEScoreFunction s);
const char* moe_load_balancing_name(MoELoadBalancing l);
const char* moe_drop_policy_name(MoEDropPolicy p);

}  // namespace megadlm
