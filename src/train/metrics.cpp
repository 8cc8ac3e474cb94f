#include "train/metrics.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "nn/moe/moe_counts.h"

namespace megadlm {

MemoryEstimate estimate_memory(const TransformerConfig& c, int64_t params, int64_t micro_batch, int64_t T,
                               const MemoryOptions& options) {
  MemoryEstimate m;
  m.params_bytes = 4.0 * 4.0 * static_cast<double>(params);
  // Allocation by allocation, with the precision policy and the recomputation plan.
  m.activations_bytes = activation_peak_bytes(c, micro_batch, T, options);
  m.precision_bytes = precision_buffer_bytes(c, micro_batch, T, options);
  return m;
}

double model_flops_per_token(const TransformerConfig& c, int64_t T) {
  const double C = static_cast<double>(c.hidden_size);
  const double qkv = static_cast<double>((c.num_attention_heads + 2 * c.num_query_groups) * c.kv_channels);
  const double hd = static_cast<double>(c.num_attention_heads * c.kv_channels);
  double matrix_params = static_cast<double>(c.num_layers) * (C * qkv + hd * C) + static_cast<double>(c.vocab_size) * C;
  // MoE: only the router and the k experts a token is routed to count (active parameters).
  for (int64_t l = 0; l < c.num_layers; ++l) matrix_params += static_cast<double>(ffn_counts(c, l).active_matrix);
  return 6.0 * matrix_params + 12.0 * static_cast<double>(c.num_layers) * hd * static_cast<double>(T);
}

JsonlWriter::JsonlWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "a");
  MEGADLM_CHECK(f_ != nullptr, path, ": cannot open the metrics file for appending (", errno_text(), ")");
}

JsonlWriter::~JsonlWriter() {
  if (f_) std::fclose(f_);
}

void JsonlWriter::write(const nlohmann::json& j) {
  if (!f_) return;
  const std::string line = j.dump() + "\n";
  // Each line reaches the file before training goes on: a full disk stops the run here, naming the
  // file, instead of leaving a metrics file that silently ends early.
  const bool ok = std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0;
  MEGADLM_CHECK(ok, path_, ": write failed (", errno_text(), ")");
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

}  // namespace megadlm
