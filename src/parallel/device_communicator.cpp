#include "parallel/device_communicator.h"

#include <mutex>

#include "core/error.h"

namespace megadlm {

namespace {
std::mutex g_mu;
DeviceCommunicatorFactory g_cuda = nullptr;  // the only non-CPU device so far
}  // namespace

DeviceCommunicatorFactory register_device_communicator(Device device, DeviceCommunicatorFactory factory) {
  MEGADLM_CHECK(device == Device::CUDA, "register_device_communicator: only a CUDA device takes a device communicator");
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceCommunicatorFactory previous = g_cuda;
  g_cuda = factory;
  return previous;
}

std::shared_ptr<Communicator> make_device_communicator(Device device, Communicator& bootstrap, const std::string& name) {
  MEGADLM_CHECK(device == Device::CUDA, "make_device_communicator: the host's groups use their MPI communicator");
  DeviceCommunicatorFactory f = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    f = g_cuda;
  }
  MEGADLM_CHECK(f != nullptr, "the ", name, " group on --device cuda needs NCCL, and this build has none (install NCCL or ",
                "point NCCL_ROOT at it, then reconfigure with -DMEGADLM_CUDA=ON; docs/cuda.md)");
  std::shared_ptr<Communicator> c = f(bootstrap, name);
  MEGADLM_CHECK(c && c->size() == bootstrap.size() && c->rank() == bootstrap.rank(), "the ", name,
                " group's device communicator does not match its ranks");
  return c;
}

}  // namespace megadlm
