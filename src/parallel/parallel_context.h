#pragma once
// ParallelContext: where this process sits in the tensor / pipeline / data / expert / context grid.
// Every module is written against it from the first line; in a single process every group has size 1
// and the communication hooks below are identities. The MPI and NCCL communicators plug in here.
#include <cstdint>

namespace megadlm {

struct ParallelGroup {
  int size = 1;
  int rank = 0;
};

struct ParallelContext {
  ParallelGroup tp;  // tensor-model-parallel
  ParallelGroup pp;  // pipeline-model-parallel
  ParallelGroup dp;  // data-parallel
  ParallelGroup ep;  // expert-model-parallel
  ParallelGroup cp;  // context-parallel
  int world_size = 1;
  int world_rank = 0;

  bool is_first_stage() const { return pp.rank == 0; }
  bool is_last_stage() const { return pp.rank == pp.size - 1; }
  static ParallelContext single() { return ParallelContext{}; }
};

// Tensor-parallel mappings (Megatron's copy_to / reduce_from / gather_from regions). With tp = 1
// they do nothing; they are named here so the call sites exist where the all-reduces will go.
inline void tp_all_reduce_sum(const ParallelContext& ctx, float* data, int64_t n) {
  (void)ctx; (void)data; (void)n;  // tp.size == 1: nothing to reduce
}

}  // namespace megadlm
