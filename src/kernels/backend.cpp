// The Backend ops with a default implementation shared by the devices.
#include "kernels/backend.h"

#include <vector>

#include "core/error.h"
#include "kernels/cpu/rope.h"

namespace megadlm {

void Backend::rope_tables(float* cos, float* sin, int64_t P, int64_t D, double base) const {
  const size_t n = static_cast<size_t>(P * (D / 2));
  std::vector<float> c(n), s(n);
  cpu::rope_tables(c.data(), s.data(), P, D, base);
  copy_to_device(cos, c.data(), n * sizeof(float));
  copy_to_device(sin, s.data(), n * sizeof(float));
}

void Backend::gemm_bf16_to_bf16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                                const uint16_t*, int64_t, uint16_t*, int64_t, float*, int64_t) const {
  fail("the bf16-output product is not implemented on ", device_name(device()),
       " (bf16_logits() is false: the output layer keeps fp32 logits there)");
}

static void no_fused_activations(Device d) {
  fail("the fused bf16 activation passes are not implemented on ", device_name(d),
       " (fused_bf16_activations() is false: the MLP takes the fp32 ops there)");
}

void Backend::activation_forward_bf16(Activation, uint16_t*, uint16_t*, const float*, const float*, int64_t,
                                      int64_t) const {
  no_fused_activations(device());
}
void Backend::activation_remake_bf16(Activation, uint16_t*, const uint16_t*, int64_t, int64_t) const {
  no_fused_activations(device());
}
void Backend::activation_backward_from_bf16(Activation, float*, const uint16_t*, const float*, int64_t,
                                            int64_t) const {
  no_fused_activations(device());
}
void Backend::activation_backward_bf16(Activation, uint16_t*, float*, const uint16_t*, const float*, int64_t,
                                       int64_t) const {
  no_fused_activations(device());
}
void Backend::gelu_remake_and_backward_bf16(uint16_t*, uint16_t*, float*, const uint16_t*, const float*, int64_t,
                                            int64_t) const {
  no_fused_activations(device());
}

}  // namespace megadlm
