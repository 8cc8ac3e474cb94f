#pragma once
// A Communicator (parallel/communicator.h) over NCCL, for device buffers: every pointer handed to it is a
// DEVICE pointer (counts in elements as in the interface; the host-side counts of all_to_all_v stay on
// the host). Built when -DMEGADLM_CUDA=ON finds NCCL (MEGADLM_HAVE_NCCL defined).
//
// Bootstrap: rank 0 of `bootstrap` (an MPI communicator of the same group, or any Communicator whose
// broadcast reaches every member) creates the ncclUniqueId and broadcasts its 128 bytes; every rank then
// joins with ncclCommInitRank. Each process drives the GPU it has selected (cudaSetDevice) beforehand.
//
// Collectives run on the communicator's own stream, after the work queued so far on the legacy default
// stream (the backend's kernels; an event recorded there is waited for). The blocking calls synchronise
// their stream before returning, so the data is ready on return as with MPI; all_reduce_sum_async and
// send_recv_async (context parallelism's ring) record an event that wait() synchronises on. Tags of
// send/recv are ignored: NCCL orders point-to-point traffic per peer, so pipeline stages must post
// matching sends and receives in the same order (as the 1F1B schedule does).
#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/device_communicator.h"

namespace megadlm::cuda {

// Collective over `bootstrap`'s ranks; the new communicator has the same size, ranks and `name`.
std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, const std::string& name);

// Makes make_nccl_communicator the device communicator factory of Device::CUDA
// (parallel/device_communicator.h); the CUDA backend calls it when it starts. This header is the one
// place where kernels/ reaches up into parallel/ (docs/ARCHITECTURE.md, "Exceptions").
void register_nccl_communicator();

// NCCL's version as "major.minor.patch" (for logs and the GPU check script).
std::string nccl_version();

}  // namespace megadlm::cuda
