#pragma once
// Communicators for buffers that live on a device. A parallel group whose tensors are on a GPU needs a
// collective library that reads device memory (NCCL); its host-side traffic (losses, counts, the
// checkpoint's metadata) keeps the MPI communicator of the same group. The backend that owns the
// device registers a factory here when it starts (kernels/cuda/backend_cuda.cpp: NCCL, bootstrapped
// over the group's MPI communicator), as it registers its memory table (core/device_memory.h), so that
// parallel/ does not depend on any backend; a test may register an emulating one.
#include <memory>
#include <string>

#include "core/tensor.h"
#include "parallel/communicator.h"

namespace megadlm {

// Makes the device communicator of the group `bootstrap` spans (same size, ranks and name); collective
// over that group.
using DeviceCommunicatorFactory = std::shared_ptr<Communicator> (*)(Communicator& bootstrap, const std::string& name);

// Replaces the factory of a non-CPU device; returns the previous one (null when none).
DeviceCommunicatorFactory register_device_communicator(Device device, DeviceCommunicatorFactory factory);

// The device communicator of `bootstrap`'s group; throws Error when `device` has no factory (a CUDA
// build without NCCL, or the backend not started yet).
std::shared_ptr<Communicator> make_device_communicator(Device device, Communicator& bootstrap, const std::string& name);

}  // namespace megadlm
