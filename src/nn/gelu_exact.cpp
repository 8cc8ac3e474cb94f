#include "nn/gelu_exact.h"

#include <cmath>

#include "core/error.h"

namespace megadlm {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

void check_host(const Tensor& t) {
  MEGADLM_CHECK(t.device() == Device::CPU && t.dtype() == DType::F32,
                "the exact (erf) GELU of the BERT family runs on the CPU in fp32 only");
}

}  // namespace

void gelu_exact_forward(const Tensor& out, const Tensor& inp) {
  check_host(out);
  check_host(inp);
  const int64_t n = inp.numel();
  MEGADLM_CHECK(out.numel() == n, "gelu_exact_forward: ", out.numel(), " outputs for ", n, " inputs");
  float* o = const_cast<float*>(out.data<float>());
  const float* x = inp.data<float>();
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    o[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
  }
}

void gelu_exact_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  check_host(dinp);
  check_host(inp);
  check_host(dout);
  const int64_t n = inp.numel();
  MEGADLM_CHECK(dinp.numel() == n && dout.numel() == n, "gelu_exact_backward: sizes differ");
  float* d = const_cast<float*>(dinp.data<float>());
  const float* x = inp.data<float>();
  const float* g = dout.data<float>();
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    const double cdf = 0.5 * (1.0 + std::erf(v * kInvSqrt2));
    const double pdf = kInvSqrt2Pi * std::exp(-0.5 * v * v);
    d[i] = static_cast<float>(g[i] * (cdf + v * pdf));
  }
}

}  // namespace megadlm
