#pragma once
// Checkpoints across layouts: the files always hold the FULL tensors of the single-process model, so a
// checkpoint saved under one layout loads under any other. Saving gathers every rank's pieces into a
// single-process ParamStore on world rank 0 (tensor-parallel shards placed by ParamInfo.full_shape /
// split_dim / shard_begin, pipeline stages' parameters by name); loading takes each rank's piece out
// of a single-process ParamStore read from the files. AdamW moments travel with the parameters
// (after the distributed optimizer gathered its shards into full-size buffers).
//
// Which ranks send: expert-data-parallel rank 0 of every (tp, pp) coordinate, that is data-parallel
// rank 0 and, under expert parallelism, the dp ranks holding the other experts (ep = dp % ep_size);
// the other dp ranks hold copies. A parameter present on two ranks that send (tied embeddings with
// pp > 1, the dense parameters of the ep ranks) is identical on both.
#include <cstdint>

#include "core/parameters.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// Flat AdamW moments laid out like a ParamStore's buffers (null: no optimizer state).
struct MomentBuffers {
  float* m = nullptr;
  float* v = nullptr;
};

// Collective over the world. On world rank 0, `full` (a finalised single-process store of the same
// model) receives every parameter, and full_moments (when not null) the moments; other ranks pass
// full = nullptr. Throws Error naming a parameter rank 0 does not know or whose shape disagrees.
void gather_full_state(const ParamStore& local, MomentBuffers local_moments, const ParallelContext& ctx,
                       ParamStore* full, MomentBuffers full_moments);

// This rank's piece of every local parameter (and moment, when both are given) from a full store.
void take_local_state(const ParamStore& full, MomentBuffers full_moments, ParamStore& local,
                      MomentBuffers local_moments);

}  // namespace megadlm
