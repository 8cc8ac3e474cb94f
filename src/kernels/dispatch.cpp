#include "kernels/dispatch.h"

namespace megadlm {

#ifdef MEGADLM_HAVE_CUDA
bool cuda_available_impl();       // kernels/cuda/device.cpp
int cuda_select_device_impl(int local_rank);  // kernels/cuda/device.cpp
const Backend& cuda_backend();    // kernels/cuda/backend_cuda.cpp (registers the CUDA memory table)
int cuda_device_count_impl();      // kernels/cuda/device.cpp
bool cuda_compiled() { return true; }
bool cuda_available() { return cuda_available_impl(); }
int cuda_device_count() { return cuda_device_count_impl(); }
#else
bool cuda_compiled() { return false; }
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
#endif

void require_backend(Device device, const char* op) {
  if (device == Device::CPU) return;
  MEGADLM_CHECK(cuda_compiled(), op, ": a CUDA tensor, but this build has no CUDA backend (configure with -DMEGADLM_CUDA=ON)");
  MEGADLM_CHECK(cuda_available(), op, ": a CUDA tensor, but no GPU is visible");
}

int gpu_for_local_rank(int local_rank, int visible) {
  MEGADLM_CHECK(local_rank >= 0, "node-local rank ", local_rank, " is negative");
  if (visible <= 1) return 0;
  MEGADLM_CHECK(local_rank < visible, "node-local rank ", local_rank, " needs GPU ", local_rank, " but only ", visible,
                " GPUs are visible (CUDA_VISIBLE_DEVICES): ranks of this node would share a GPU. Start at most ", visible,
                " ranks per node (mpirun --map-by ppr:", visible, ":node, srun --ntasks-per-node=", visible, ")");
  return local_rank;
}

static const Backend* g_test_backend = nullptr;  // serves Device::CUDA when set

int select_device(Device device, int local_rank) {
  if (device == Device::CPU || g_test_backend) return 0;
#ifdef MEGADLM_HAVE_CUDA
  return cuda_select_device_impl(local_rank);
#else
  (void)local_rank;
  return 0;
#endif
}

void set_backend_for_testing(Device device, const Backend* backend) {
  MEGADLM_CHECK(device == Device::CUDA, "set_backend_for_testing: only the CUDA device can be emulated");
  g_test_backend = backend;
}

const Backend& backend_for(Device device) {
  if (device == Device::CPU) return cpu_backend();
  if (g_test_backend) return *g_test_backend;
#ifdef MEGADLM_HAVE_CUDA
  static const Backend& cuda = [] () -> const Backend& {
    MEGADLM_CHECK(cuda_available(), "no GPU is visible (cudaGetDeviceCount found none)");
    return cuda_backend();
  }();
  return cuda;
#else
  fail("this build has no CUDA backend (configure with -DMEGADLM_CUDA=ON, e.g. scripts/build_cuda.sh)");
#endif
}

}  // namespace megadlm
