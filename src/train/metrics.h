#pragma once
// What the trainer reports besides the loss: memory estimate (to refuse a model that cannot fit
// before allocating it), the machine's measured matrix-product peak (for MFU), model FLOPs per
// token, and the .jsonl metrics file.
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/transformer_config.h"
#include "train/activation_memory.h"

namespace megadlm {

struct MemoryEstimate {
  double params_bytes = 0;       // parameters + gradients + AdamW moments (fp32)
  double activations_bytes = 0;  // peak of the activation arena in one micro-batch's forward_backward
  double precision_bytes = 0;    // low-precision weight copies and scratch (train/activation_memory.h)
  double total() const { return params_bytes + activations_bytes + precision_bytes; }
};
MemoryEstimate estimate_memory(const TransformerConfig& cfg, int64_t params, int64_t micro_batch, int64_t T,
                               const MemoryOptions& options = {});

// Model FLOPs per token for a forward + backward (the PaLM convention): 6 x (matrix parameters,
// including the output layer) + 12 x layers x heads x head dim x T (attention scores and values,
// counted in full even under a causal mask).
double model_flops_per_token(const TransformerConfig& cfg, int64_t T);

class JsonlWriter {
 public:
  JsonlWriter() = default;
  explicit JsonlWriter(const std::string& path);  // appends
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const nlohmann::json& j);  // one line, flushed; an Error naming the file when it fails
  bool open() const { return f_ != nullptr; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

std::string human_bytes(double bytes);  // "1.23 GiB"
std::string human_count(double n);      // "12.3M"

}  // namespace megadlm
