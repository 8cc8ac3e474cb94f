#pragma once
// MoE training metrics: per MoE layer the tokens routed to each expert, the dropped fraction and the
// aux / z losses, taken from the layers (and reset there) after each step and summed over the log
// interval.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/language_model.h"
#include "parallel/parallel_context.h"

namespace megadlm {

struct MoELayerReport {
  std::string name;
  MoEStats stats;
};

struct MoEReport {
  std::vector<MoELayerReport> layers;
  double aux_loss = 0;  // sum over layers of the mean per micro-batch: what the step's objective adds
  double z_loss = 0;
  double dropped_fraction = 0;  // over every layer's assignments
  bool empty() const { return layers.empty(); }
};

// Each MoE layer's statistics since the last take, in layer order; resets them in the layers.
std::vector<MoELayerReport> take_moe_layers(LanguageModel& model);
// Sums the layers' statistics over the data-parallel group, so that every dp rank (the one that logs among
// them) reports the step's micro-batches of all of them. Context-parallel ranks already agree (the
// router sums over cp) and tensor-parallel ranks hold copies, so neither is summed.
void sum_moe_layers_over_dp(const ParallelGroup& dp, std::vector<MoELayerReport>& layers);
// Adds `more` (the same layers, as take_moe_layers gives them) into `into`; an empty `into` takes a copy.
void add_moe_layers(std::vector<MoELayerReport>& into, const std::vector<MoELayerReport>& more);
// The totals over the layers.
MoEReport summarize_moe(std::vector<MoELayerReport> layers);
std::string moe_line_suffix(const MoEReport& r);      // " | moe aux ... | moe z ... | moe dropped ..."
std::vector<std::string> moe_layer_lines(const MoEReport& r);
void add_moe_metrics(const MoEReport& r, nlohmann::json& j);

}  // namespace megadlm
