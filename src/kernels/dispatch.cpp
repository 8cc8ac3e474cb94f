#include "kernels/dispatch.h"

namespace megadlm {

#ifdef MEGADLM_HAVE_CUDA
bool cuda_available_impl();  // kernels/cuda/device.cpp
bool cuda_compiled() { return true; }
bool cuda_available() { return cuda_available_impl(); }
#else
bool cuda_compiled() { return false; }
bool cuda_available() { return false; }
#endif

void require_backend(Device device, const char* op) {
  if (device == Device::CPU) return;
  MDLM_CHECK(cuda_compiled(), op, ": a CUDA tensor, but this build has no CUDA backend (configure with -DMEGADLM_CUDA=ON)");
  MDLM_CHECK(cuda_available(), op, ": a CUDA tensor, but no GPU is visible");
}

}  // namespace megadlm
