#include "models/moe_config_json.h"

#include "core/error.h"

namespace megadlm {

nlohmann::json moe_config_to_json(const MoEConfig& m) {
  nlohmann::json j;
  j["num_experts"] = m.num_experts;
  j["layer_freq"] = m.layer_freq;
  if (!m.layer_pattern.empty()) j["layer_pattern"] = m.layer_pattern;
  j["router_topk"] = m.topk;
  j["router_type"] = moe_router_type_name(m.router_type);
  j["router_score_function"] = moe_score_function_name(m.score_function);
  j["router_pre_softmax"] = m.pre_softmax;
  j["router_load_balancing_type"] = moe_load_balancing_name(m.load_balancing);
  j["aux_loss_coeff"] = m.aux_loss_coeff;
  j["z_loss_coeff"] = m.z_loss_coeff;
  j["expert_capacity_factor"] = m.capacity_factor;
  j["token_drop_policy"] = moe_drop_policy_name(m.drop_policy);
  j["pad_expert_input_to_capacity"] = m.pad_to_capacity;
  j["ffn_hidden_size"] = m.ffn_hidden_size;
  j["shared_expert_intermediate_size"] = m.shared_expert_size;
  j["grouped_gemm"] = m.grouped_gemm;
  return j;
}

MoEConfig moe_config_from_json(const nlohmann::json& j, const std::string& where) {
  MEGADLM_CHECK(j.is_object() && j.contains("num_experts"), where, ": moe config lacks 'num_experts'");
  MoEConfig m;
  m.num_experts = j["num_experts"].get<int64_t>();
  m.layer_freq = j.value("layer_freq", int64_t{1});
  if (j.contains("layer_pattern")) m.layer_pattern = j["layer_pattern"].get<std::vector<uint8_t>>();
  m.topk = j.value("router_topk", int64_t{2});
  const std::string rt = j.value("router_type", std::string("topk"));
  MEGADLM_CHECK(rt == "topk" || rt == "expert_choice", where, ": unknown moe router_type '", rt, "'");
  m.router_type = rt == "topk" ? MoERouterType::TopK : MoERouterType::ExpertChoice;
  const std::string sf = j.value("router_score_function", std::string("softmax"));
  MEGADLM_CHECK(sf == "softmax" || sf == "sigmoid", where, ": unknown moe router_score_function '", sf, "'");
  m.score_function = sf == "softmax" ? MoEScoreFunction::Softmax : MoEScoreFunction::Sigmoid;
  m.pre_softmax = j.value("router_pre_softmax", false);
  const std::string lb = j.value("router_load_balancing_type", std::string("aux_loss"));
  if (lb == "aux_loss") m.load_balancing = MoELoadBalancing::AuxLoss;
  else if (lb == "seq_aux_loss") m.load_balancing = MoELoadBalancing::SeqAuxLoss;
  else if (lb == "none") m.load_balancing = MoELoadBalancing::None;
  else fail(where, ": unknown moe router_load_balancing_type '", lb, "'");
  m.aux_loss_coeff = j.value("aux_loss_coeff", 0.0f);
  m.z_loss_coeff = j.value("z_loss_coeff", 0.0f);
  m.capacity_factor = j.value("expert_capacity_factor", 0.0);
  const std::string dp = j.value("token_drop_policy", std::string("probs"));
  MEGADLM_CHECK(dp == "probs" || dp == "position", where, ": unknown moe token_drop_policy '", dp, "'");
  m.drop_policy = dp == "probs" ? MoEDropPolicy::Probs : MoEDropPolicy::Position;
  m.pad_to_capacity = j.value("pad_expert_input_to_capacity", false);
  m.ffn_hidden_size = j.value("ffn_hidden_size", int64_t{0});
  m.shared_expert_size = j.value("shared_expert_intermediate_size", int64_t{0});
  m.grouped_gemm = j.value("grouped_gemm", false);
  return m;
}

}  // namespace megadlm
