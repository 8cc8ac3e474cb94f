#include "train/moe_arguments.h"

#include <sstream>

#include "core/error.h"

namespace megadlm {

void declare_moe_flags(CliFlags& f) {
  f.add_int("num-experts", 0, "Mixture-of-Experts experts per layer (0 = dense)", at_least(0));
  f.add_string("moe-grouped-gemm", "false", "true or false: all experts in one grouped pass over permuted tokens");
  f.add_string("moe-layer-freq", "1", "N: every N-th layer is MoE (0, N, 2N, ...), or a 0/1 list like [1,0,1,0]");
  f.add_int("moe-router-topk", 2, "experts per token (expert choice: capacity = tokens * topk / experts)", at_least(1));
  f.add_string("moe-router-type", "topk", "topk (token choice) or expert_choice");
  f.add_string("moe-router-score-function", "softmax", "softmax or sigmoid");
  f.add_bool("moe-router-pre-softmax", "softmax over all experts before the top-k (default: after)");
  f.add_string("moe-router-load-balancing-type", "aux_loss", "aux_loss, seq_aux_loss or none");
  f.add_double("moe-aux-loss-coeff", 0.0, "load-balancing loss coefficient", at_least(0));
  f.add_double("moe-z-loss-coeff", 0.0, "router z-loss coefficient", at_least(0));
  f.add_double("moe-expert-capacity-factor", 0.0, "expert capacity factor (0 = no capacity limit)", at_least(0));
  f.add_string("moe-token-drop-policy", "probs", "probs or position: which tokens an expert over capacity keeps");
  f.add_bool("moe-pad-expert-input-to-capacity", "pad each expert's input to its capacity");
  f.add_int("moe-ffn-hidden-size", 0, "expert ffn hidden size (default --ffn-hidden-size)", at_least(0));
  f.add_int("moe-shared-expert-intermediate-size", 0, "shared expert ffn hidden size (0 = no shared expert)", at_least(0));
}

static bool bool_value(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1" || v == "True") return true;
  if (v == "false" || v == "0" || v == "False") return false;
  fail("--", flag, " expects true or false, got '", v, "'");
}

static void parse_layer_freq(const std::string& v, int64_t num_layers, MoEConfig& m) {
  if (!v.empty() && v.front() == '[') {
    MEGADLM_CHECK(v.back() == ']', "--moe-layer-freq: list '", v, "' is not closed by ]");
    m.layer_pattern.clear();
    std::stringstream ss(v.substr(1, v.size() - 2));
    std::string item;
    while (std::getline(ss, item, ',')) {
      const size_t a = item.find_first_not_of(' '), b = item.find_last_not_of(' ');
      MEGADLM_CHECK(a != std::string::npos, "--moe-layer-freq: empty entry in '", v, "'");
      item = item.substr(a, b - a + 1);
      MEGADLM_CHECK(item == "0" || item == "1", "--moe-layer-freq: entries must be 0 or 1, got '", item, "'");
      m.layer_pattern.push_back(item == "1" ? 1 : 0);
    }
    MEGADLM_CHECK(static_cast<int64_t>(m.layer_pattern.size()) == num_layers, "--moe-layer-freq: list has ",
                  m.layer_pattern.size(), " entries but --num-layers is ", num_layers);
    return;
  }
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MEGADLM_CHECK(used == v.size() && n >= 1, "--moe-layer-freq expects a positive integer or a 0/1 list, got '", v, "'");
  m.layer_freq = n;
}

void read_moe_flags(const CliFlags& f, TransformerConfig& model) {
  MoEConfig& m = model.moe;
  m = MoEConfig();
  m.grouped_gemm = bool_value("moe-grouped-gemm", f.get_string("moe-grouped-gemm"));
  m.num_experts = f.get_int("num-experts");
  MEGADLM_CHECK(m.num_experts >= 0, "--num-experts must be 0 (dense) or positive, got ", m.num_experts);
  if (m.num_experts == 0) return;
  parse_layer_freq(f.get_string("moe-layer-freq"), model.num_layers, m);
  m.topk = f.get_int("moe-router-topk");
  MEGADLM_CHECK(m.topk >= 1 && m.topk <= m.num_experts, "--moe-router-topk ", m.topk, " must be in [1, --num-experts ",
                m.num_experts, "]");
  const std::string rt = f.get_string("moe-router-type");
  if (rt == "topk") m.router_type = MoERouterType::TopK;
  else if (rt == "expert_choice") m.router_type = MoERouterType::ExpertChoice;
  else fail("--moe-router-type: unknown value '", rt, "' (expected topk or expert_choice)");
  const std::string sf = f.get_string("moe-router-score-function");
  if (sf == "softmax") m.score_function = MoEScoreFunction::Softmax;
  else if (sf == "sigmoid") m.score_function = MoEScoreFunction::Sigmoid;
  else fail("--moe-router-score-function: unknown value '", sf, "' (expected softmax or sigmoid)");
  m.pre_softmax = f.get_bool("moe-router-pre-softmax");
  MEGADLM_CHECK(!m.pre_softmax || m.score_function == MoEScoreFunction::Softmax,
                "--moe-router-pre-softmax applies to --moe-router-score-function softmax only");
  const std::string lb = f.get_string("moe-router-load-balancing-type");
  if (lb == "aux_loss") m.load_balancing = MoELoadBalancing::AuxLoss;
  else if (lb == "seq_aux_loss") m.load_balancing = MoELoadBalancing::SeqAuxLoss;
  else if (lb == "none") m.load_balancing = MoELoadBalancing::None;
  else fail("--moe-router-load-balancing-type: unknown value '", lb, "' (expected aux_loss, seq_aux_loss or none)");
  m.aux_loss_coeff = static_cast<float>(f.get_double("moe-aux-loss-coeff"));
  m.z_loss_coeff = static_cast<float>(f.get_double("moe-z-loss-coeff"));
  if (m.router_type == MoERouterType::ExpertChoice) {
    // Expert choice balances the load by construction; a load-balancing loss has nothing to do.
    MEGADLM_CHECK(!f.given("moe-router-load-balancing-type") || m.load_balancing == MoELoadBalancing::None,
                  "--moe-router-type expert_choice takes no load-balancing loss (use --moe-router-load-balancing-type none)");
    m.load_balancing = MoELoadBalancing::None;
  }
  m.capacity_factor = f.get_double("moe-expert-capacity-factor");
  const std::string dp = f.get_string("moe-token-drop-policy");
  if (dp == "probs") m.drop_policy = MoEDropPolicy::Probs;
  else if (dp == "position") m.drop_policy = MoEDropPolicy::Position;
  else fail("--moe-token-drop-policy: unknown value '", dp, "' (expected probs or position)");
  m.pad_to_capacity = f.get_bool("moe-pad-expert-input-to-capacity");
  MEGADLM_CHECK(!m.pad_to_capacity || m.capacity_factor > 0,
                "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor > 0");
  m.ffn_hidden_size = f.get_int("moe-ffn-hidden-size") > 0 ? f.get_int("moe-ffn-hidden-size") : model.ffn_hidden_size;
  m.shared_expert_size = f.get_int("moe-shared-expert-intermediate-size");
}

std::string describe_moe(const TransformerConfig& model) {
  const MoEConfig& m = model.moe;
  if (!m.enabled()) return "";
  int64_t layers = 0;
  for (int64_t l = 0; l < model.num_layers; ++l) layers += m.is_moe_layer(l);
  std::ostringstream o;
  o << "MoE: " << m.num_experts << " experts (ffn " << m.ffn_hidden_size << ") in " << layers << "/" << model.num_layers
    << " layers, router " << moe_router_type_name(m.router_type) << " k=" << m.topk << " "
    << moe_score_function_name(m.score_function) << (m.pre_softmax ? " (pre-softmax)" : "") << ", load balancing "
    << moe_load_balancing_name(m.load_balancing) << " coeff " << m.aux_loss_coeff << ", z-loss coeff " << m.z_loss_coeff
    << ", capacity factor " << m.capacity_factor;
  if (m.capacity_factor > 0)
    o << " (drop by " << moe_drop_policy_name(m.drop_policy) << (m.pad_to_capacity ? ", padded" : "") << ")";
  if (m.shared_expert_size > 0) o << ", shared expert ffn " << m.shared_expert_size;
  o << ", " << (m.grouped_gemm ? "grouped" : "looped") << " expert GEMMs";
  return o.str();
}

}  // namespace megadlm
