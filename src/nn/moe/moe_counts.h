#pragma once
// Sizes of the feed-forward block of one layer, dense or MoE, for parameter counts, the memory
// estimate and model FLOPs: an MoE layer holds E experts (+ router, + shared expert) but a token only
// passes through k of them, so FLOPs use the active matrix parameters.
#include <cstdint>

#include "nn/transformer_config.h"

namespace megadlm {

struct FfnCounts {
  int64_t params = 0;          // every parameter of the block (biases included)
  int64_t active_matrix = 0;   // matrix parameters one token multiplies by (router, k experts, shared)
  double saved_per_token = 0;  // floats per token saved for the backward (activations)
};

FfnCounts ffn_counts(const TransformerConfig& cfg, int64_t layer);

}  // namespace megadlm
