#include "nn/host_activation.h"

#include <cmath>

#include "core/error.h"
#include "nn/gelu_exact.h"

namespace megadlm {

namespace {

constexpr double kQuickGeluScale = 1.702;

void check_host(const Tensor& t) {
  MEGADLM_CHECK(t.device() == Device::CPU && t.dtype() == DType::F32,
                "the quick GELU of CLIP's vision tower runs on the CPU in fp32 only");
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

void quick_gelu_forward(const Tensor& out, const Tensor& inp) {
  check_host(out);
  check_host(inp);
  const int64_t n = inp.numel();
  MEGADLM_CHECK(out.numel() == n, "quick_gelu_forward: ", out.numel(), " outputs for ", n, " inputs");
  float* o = const_cast<float*>(out.data<float>());
  const float* x = inp.data<float>();
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    o[i] = static_cast<float>(v * sigmoid(kQuickGeluScale * v));
  }
}

void quick_gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  check_host(dinp);
  check_host(inp);
  check_host(dout);
  const int64_t n = inp.numel();
  MEGADLM_CHECK(dinp.numel() == n && dout.numel() == n, "quick_gelu_backward: sizes differ");
  float* d = const_cast<float*>(dinp.data<float>());
  const float* x = inp.data<float>();
  const float* g = dout.data<float>();
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    // d/dx [x s(a x)] = s + a x s (1 - s)
    const double s = sigmoid(kQuickGeluScale * v);
    d[i] = static_cast<float>(g[i] * (s + kQuickGeluScale * v * s * (1.0 - s)));
  }
}

void host_activation_forward(HostActivation act, const Tensor& out, const Tensor& inp) {
  switch (act) {
    case HostActivation::GeluErf: return gelu_exact_forward(out, inp);
    case HostActivation::QuickGelu: return quick_gelu_forward(out, inp);
    case HostActivation::None: break;
  }
  fail("host_activation_forward: no host activation given");
}

void host_activation_backward(HostActivation act, const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  switch (act) {
    case HostActivation::GeluErf: return gelu_exact_backward(dinp, inp, dout);
    case HostActivation::QuickGelu: return quick_gelu_backward(dinp, inp, dout);
    case HostActivation::None: break;
  }
  fail("host_activation_backward: no host activation given");
}

}  // namespace megadlm
