#include "nn/host_activation.h"

#include <cmath>

#include "core/error.h"
#include "nn/gelu_exact.h"

namespace megadlm {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kQuickGeluScale = 1.702;

void check_host(const Tensor& t, const char* what) {
  MEGADLM_CHECK(t.device() == Device::CPU && t.dtype() == DType::F32, what, " runs on the CPU in fp32 only");
}

// out [n] = f(inp [n]), each value in double; may alias.
template <typename F>
void map_forward(const Tensor& out, const Tensor& inp, const char* what, F f) {
  check_host(out, what);
  check_host(inp, what);
  const int64_t n = inp.numel();
  MEGADLM_CHECK(out.numel() == n, what, ": ", out.numel(), " outputs for ", n, " inputs");
  float* o = const_cast<float*>(out.data<float>());
  const float* x = inp.data<float>();
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(f(static_cast<double>(x[i])));
}

// dinp [n] = dout * df(inp); dinp may alias dout.
template <typename F>
void map_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, const char* what, F df) {
  check_host(dinp, what);
  check_host(inp, what);
  check_host(dout, what);
  const int64_t n = inp.numel();
  MEGADLM_CHECK(dinp.numel() == n && dout.numel() == n, what, ": the backward's sizes differ");
  float* d = const_cast<float*>(dinp.data<float>());
  const float* x = inp.data<float>();
  const float* g = dout.data<float>();
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(g[i] * df(static_cast<double>(x[i])));
}

constexpr const char* kGeluErf = "the exact (erf) GELU of the BERT family";
constexpr const char* kQuickGelu = "the quick GELU of CLIP's vision tower";

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

}  // namespace

void gelu_exact_forward(const Tensor& out, const Tensor& inp) {
  map_forward(out, inp, kGeluErf, [](double v) { return 0.5 * v * (1.0 + std::erf(v * kInvSqrt2)); });
}

void gelu_exact_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  // d/dx [x Phi(x)] = Phi(x) + x phi(x)
  map_backward(dinp, inp, dout, kGeluErf, [](double v) {
    return 0.5 * (1.0 + std::erf(v * kInvSqrt2)) + v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
  });
}

void quick_gelu_forward(const Tensor& out, const Tensor& inp) {
  map_forward(out, inp, kQuickGelu, [](double v) { return v * sigmoid(kQuickGeluScale * v); });
}

void quick_gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  // d/dx [x s(a x)] = s + a x s (1 - s)
  map_backward(dinp, inp, dout, kQuickGelu, [](double v) {
    const double s = sigmoid(kQuickGeluScale * v);
    return s + kQuickGeluScale * v * s * (1.0 - s);
  });
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
