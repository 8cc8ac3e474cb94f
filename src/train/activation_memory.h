#pragma once
// The activation memory of one training micro-batch, modelled allocation by allocation after what the
// modules take from the arena (nn/*.cpp), under a precision policy and a recomputation plan; and the
// heap buffers the precision policy adds (low-precision weight copies, scratch). The trainer prints
// it at start (train/metrics.h estimate_memory) and tests hold it to the measured arena high-water.
#include <cstdint>

#include "nn/precision.h"
#include "nn/recompute.h"
#include "nn/transformer_config.h"

namespace megadlm {

struct MemoryOptions {
  PrecisionConfig precision;
  RecomputeConfig recompute;
  int context_parallel = 1;  // cp > 1: T is this rank's rows, and the ring attention's buffers count
};

// Peak bytes of activations during forward_backward of a [micro_batch, T] micro-batch: the model's
// arena plus, under a precision policy, its transient arena (MixedPrecision::transient()).
double activation_peak_bytes(const TransformerConfig& c, int64_t micro_batch, int64_t T, const MemoryOptions& o);
// Bytes of the precision policy's heap buffers (weight copies, scratch) for that micro-batch.
double precision_buffer_bytes(const TransformerConfig& c, int64_t micro_batch, int64_t T, const MemoryOptions& o);

}  // namespace megadlm
