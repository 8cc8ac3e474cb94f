#pragma once
// The parallel layout: --tensor-model-parallel-size, --pipeline-model-parallel-size,
// --context-parallel-size, --expert-model-parallel-size; data parallel is what remains of the world.
// Ranks are placed in Megatron's "tp-cp-dp-pp" order (parallel/parallel_context.h).
#include <string>

#include "parallel/parallel_context.h"

namespace megadlm {

struct ParallelLayout {
  int tp = 1, pp = 1, cp = 1, ep = 1;
};

// A rank's coordinate in each group, computed without MPI (the group builder and tests use it).
struct RankCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int ep = 0, edp = 0;  // ep = dp % ep_size, edp = dp / ep_size
  int dp_size = 1;
};

// Throws Error naming the flag when the sizes do not divide the world (or ep does not divide dp).
int data_parallel_size(const ParallelLayout& layout, int world_size);
RankCoords rank_coords(const ParallelLayout& layout, int world_size, int world_rank);
// The inverse: world rank of the given coordinates.
int world_rank_of(const ParallelLayout& layout, int world_size, int tp, int cp, int dp, int pp);

// Builds every group's communicator from the MPI world (collective: every rank must call it with the
// same layout). Without MPI the world has one rank and every group is a group of one.
ParallelContext make_parallel_context(const ParallelLayout& layout);

std::string describe(const ParallelLayout& layout, int world_size);  // "tp=2 pp=1 cp=1 dp=2 ep=1"

}  // namespace megadlm
