#pragma once
// ParallelContext: where this process sits in the tensor / pipeline / data / expert / context grid,
// and the communicator of each group. Every module is written against it; in a single process every
// group has size 1 and its communicator is a SelfCommunicator, so the same calls cost nothing.
//
// Rank order is Megatron's "tp-cp-dp-pp": tensor-parallel ranks are adjacent (same node, fastest
// links), then context, then data, then pipeline:
//   world_rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
// Expert parallelism is carved out of data parallelism: ep divides dp, the ep group is ep consecutive
// dp ranks, and expert weights are data-parallel (edp) across dp / ep such groups.
#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "parallel/communicator.h"

namespace megadlm {

struct ParallelGroup {
  int size = 1;
  int rank = 0;
  std::shared_ptr<Communicator> comm;  // null = a group of one
  // The same ranks over device buffers (NCCL; parallel/device_communicator.h), for a group whose
  // tensors live on a GPU; null on the CPU and for a group of one.
  std::shared_ptr<Communicator> device_comm;
  // The communicator; a SelfCommunicator when the group has one rank and none was set.
  Communicator& communicator() const;
  // The communicator for buffers on `device`: communicator() for the host, device_comm otherwise.
  Communicator& communicator(Device device) const;
};

struct ParallelContext {
  ParallelGroup tp;   // tensor-model-parallel
  ParallelGroup pp;   // pipeline-model-parallel
  ParallelGroup dp;   // data-parallel (dense parameters' gradients are reduced here)
  ParallelGroup ep;   // expert-model-parallel (tokens exchanged by all-to-all here)
  ParallelGroup edp;  // expert-data-parallel: dp / ep (expert parameters' gradients are reduced here)
  ParallelGroup cp;   // context-parallel
  ParallelGroup embd;  // embedding group: first and last pipeline stage (tied embeddings' gradient sum)
  ParallelGroup world;
  int world_size = 1;
  int world_rank = 0;
  // --sequence-parallel: with tp > 1, activations between blocks are split along the tokens
  // (parallel/tp_mappings.h). Set before the model is built; ignored at tp = 1.
  bool sequence_parallel = false;

  bool is_first_stage() const { return pp.rank == 0; }
  bool is_last_stage() const { return pp.rank == pp.size - 1; }
  static ParallelContext single() { return ParallelContext{}; }
};

// Tensor-parallel mappings (Megatron's copy_to / reduce_from / gather_from regions): an all-reduce
// over the tp group of data [n] on `device` (its device communicator off the host); nothing at tp = 1.
inline void tp_all_reduce_sum(const ParallelContext& ctx, float* data, int64_t n, Device device = Device::CPU) {
  if (ctx.tp.size > 1) ctx.tp.communicator(device).all_reduce_sum(data, n);
}

}  // namespace megadlm
