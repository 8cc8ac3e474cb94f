// Compiled only with -DMEGADLM_CUDA=ON. The CUDA kernels themselves arrive with the CUDA backend issue.
#include <cuda_runtime.h>

namespace megadlm {

bool cuda_available_impl() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace megadlm
