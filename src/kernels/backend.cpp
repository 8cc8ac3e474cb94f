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

// The grouped products as a loop of one gemm per non-empty group: the definition the devices' grouped
// kernels are held to, and what a backend without one runs.
void Backend::grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                                   const float* const* W, float* Y) const {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n > 0) gemm(false, true, n, N, K, 1.0f, X + r0 * K, K, W[g], K, 0.0f, Y + r0 * N, N);
  }
}

void Backend::grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                         const float* const* W, float* dX) const {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n > 0) gemm(false, false, n, K, N, 1.0f, dY + r0 * N, N, W[g], K, 0.0f, dX + r0 * K, K);
  }
}

void Backend::grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                           const float* X, float* const* dW) const {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t r0 = offsets[g], n = offsets[g + 1] - r0;
    if (n > 0) gemm(true, false, N, K, n, 1.0f, dY + r0 * N, N, X + r0 * K, K, 1.0f, dW[g], K);
  }
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
