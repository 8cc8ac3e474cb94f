// The stand-alone GPU build has no CPU backend (kernels/backend_cpu.cpp needs oneDNN for its products):
// kernels/dispatch.cpp's backend_for(Device::CPU) names that instead of failing to link. The tests of
// this build compare the CUDA ops with the CPU kernels or double references directly.
#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

const Backend& cpu_backend() {
  fail("the stand-alone GPU build (bench/cuda/CMakeLists.txt) has no CPU backend: use the full build");
}

}  // namespace megadlm
