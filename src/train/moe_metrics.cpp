#include "train/moe_metrics.h"

#include <algorithm>
#include <cstdio>

namespace megadlm {

std::vector<MoELayerReport> take_moe_layers(LanguageModel& model) {
  std::vector<MoELayerReport> out;
  for (MoELayer* layer : model.moe_layers()) out.push_back({layer->name(), layer->take_stats()});
  return out;
}

void sum_moe_layers_over_dp(const ParallelGroup& dp, std::vector<MoELayerReport>& layers) {
  if (dp.size == 1 || layers.empty()) return;
  std::vector<double> v;
  for (const MoELayerReport& l : layers) {
    const MoEStats& s = l.stats;
    v.insert(v.end(), s.tokens_per_expert.begin(), s.tokens_per_expert.end());
    v.insert(v.end(), {s.assignments, s.dropped, s.aux_loss, s.z_loss, static_cast<double>(s.micro_batches)});
  }
  dp.communicator().all_reduce_sum(v.data(), static_cast<int64_t>(v.size()));
  size_t i = 0;
  for (MoELayerReport& l : layers) {
    MoEStats& s = l.stats;
    for (double& t : s.tokens_per_expert) t = v[i++];
    s.assignments = v[i++];
    s.dropped = v[i++];
    s.aux_loss = v[i++];
    s.z_loss = v[i++];
    s.micro_batches = static_cast<int64_t>(v[i++]);
  }
}

void add_moe_layers(std::vector<MoELayerReport>& into, const std::vector<MoELayerReport>& more) {
  if (into.empty()) {
    into = more;
    return;
  }
  for (size_t l = 0; l < more.size(); ++l) {
    MoEStats& a = into[l].stats;
    const MoEStats& b = more[l].stats;
    a.tokens_per_expert.resize(std::max(a.tokens_per_expert.size(), b.tokens_per_expert.size()), 0.0);
    for (size_t e = 0; e < b.tokens_per_expert.size(); ++e) a.tokens_per_expert[e] += b.tokens_per_expert[e];
    a.assignments += b.assignments;
    a.dropped += b.dropped;
    a.aux_loss += b.aux_loss;
    a.z_loss += b.z_loss;
    a.micro_batches += b.micro_batches;
  }
}

MoEReport summarize_moe(std::vector<MoELayerReport> layers) {
  MoEReport r;
  double assignments = 0, dropped = 0;
  for (const MoELayerReport& lr : layers) {
    const double mb = lr.stats.micro_batches > 0 ? static_cast<double>(lr.stats.micro_batches) : 1.0;
    r.aux_loss += lr.stats.aux_loss / mb;
    r.z_loss += lr.stats.z_loss / mb;
    assignments += lr.stats.assignments;
    dropped += lr.stats.dropped;
  }
  r.layers = std::move(layers);
  r.dropped_fraction = assignments > 0 ? dropped / assignments : 0.0;
  return r;
}

std::string moe_line_suffix(const MoEReport& r) {
  if (r.empty()) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, " | moe aux loss %.4E | moe z loss %.4E | moe dropped %.4f", r.aux_loss, r.z_loss,
                r.dropped_fraction);
  return buf;
}

std::vector<std::string> moe_layer_lines(const MoEReport& r) {
  std::vector<std::string> out;
  for (const MoELayerReport& l : r.layers) {
    const MoEStats& s = l.stats;
    std::string line = "   " + l.name + ": tokens per expert [";
    double total = 0, mx = 0;
    for (size_t e = 0; e < s.tokens_per_expert.size(); ++e) {
      if (e) line += ' ';
      line += std::to_string(static_cast<long long>(s.tokens_per_expert[e]));
      total += s.tokens_per_expert[e];
      mx = std::max(mx, s.tokens_per_expert[e]);
    }
    const double mean = s.tokens_per_expert.empty() ? 0 : total / static_cast<double>(s.tokens_per_expert.size());
    const double mb = s.micro_batches > 0 ? static_cast<double>(s.micro_batches) : 1.0;
    char buf[200];
    std::snprintf(buf, sizeof buf, "] | max/mean load %.3f | dropped %.4f | aux loss %.4E | z loss %.4E",
                  mean > 0 ? mx / mean : 0.0, s.dropped_fraction(), s.aux_loss / mb, s.z_loss / mb);
    out.push_back(line + buf);
  }
  return out;
}

void add_moe_metrics(const MoEReport& r, nlohmann::json& j) {
  if (r.empty()) return;
  j["moe_aux_loss"] = r.aux_loss;
  j["moe_z_loss"] = r.z_loss;
  j["moe_dropped_fraction"] = r.dropped_fraction;
  nlohmann::json layers = nlohmann::json::array();
  for (const MoELayerReport& l : r.layers) {
    const double mb = l.stats.micro_batches > 0 ? static_cast<double>(l.stats.micro_batches) : 1.0;
    layers.push_back({{"layer", l.name},
                      {"tokens_per_expert", l.stats.tokens_per_expert},
                      {"dropped_fraction", l.stats.dropped_fraction()},
                      {"aux_loss", l.stats.aux_loss / mb},
                      {"z_loss", l.stats.z_loss / mb}});
  }
  j["moe_layers"] = layers;
}

}  // namespace megadlm
