#include "parallel/parallel_context.h"

#include "core/error.h"

namespace megadlm {

Communicator& ParallelGroup::communicator() const {
  if (comm) return *comm;
  MEGADLM_CHECK(size == 1, "a parallel group of size ", size, " has no communicator");
  static SelfCommunicator self;
  return self;
}

Communicator& ParallelGroup::communicator(Device device) const {
  if (device == Device::CPU || size == 1) return communicator();
  MEGADLM_CHECK(device_comm != nullptr, "a parallel group of size ", size, " has no communicator for ", device_name(device),
                " buffers");
  return *device_comm;
}

}  // namespace megadlm
