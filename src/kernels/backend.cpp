// The Backend ops with a default implementation shared by the devices.
#include "kernels/backend.h"

#include <vector>

#include "kernels/cpu/rope.h"

namespace megadlm {

void Backend::rope_tables(float* cos, float* sin, int64_t P, int64_t D, double base) const {
  const size_t n = static_cast<size_t>(P * (D / 2));
  std::vector<float> c(n), s(n);
  cpu::rope_tables(c.data(), s.data(), P, D, base);
  copy_to_device(cos, c.data(), n * sizeof(float));
  copy_to_device(sin, s.data(), n * sizeof(float));
}

}  // namespace megadlm
