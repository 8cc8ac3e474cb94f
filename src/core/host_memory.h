#pragma once
// The host's free memory, for refusing a model that cannot fit before anything large is allocated
// (the trainer's estimate, train/metrics.h, and the HuggingFace import's bound, checkpoint/hf_config.h).

namespace megadlm {

// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
double available_host_memory_bytes();

}  // namespace megadlm
