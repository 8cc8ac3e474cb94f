// The grouped expert products on a device. With a GPU: cuBLAS's grouped call (kernels/cuda/grouped_gemm.cpp)
// against the per-expert loop of gemm_f32 on the same inputs, uneven loads with empty experts. On both
// the GPU and the emulated device: the MoE experts' grouped path (--moe-grouped-gemm) on the device
// follows the CPU, forward and backward, with experts numbered from first_expert as expert parallelism
// registers them; on the emulated device it is seen to run through Backend::grouped_gemm_*.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/parameters.h"
#include "kernels/dispatch.h"
#include "nn/moe/moe_experts.h"
#include "test_util.h"
#include "cuda/cuda_test_util.h"
#include "emulated_device.h"

namespace megadlm::test {
namespace {

const std::vector<int64_t> kLoads = {0, 1, 300, 0, 129, 7, 0, 40, 0};

std::vector<int64_t> offsets_of(const std::vector<int64_t>& loads) {
  std::vector<int64_t> o{0};
  for (int64_t n : loads) o.push_back(o.back() + n);
  return o;
}

#ifdef MEGADLM_HAVE_CUDA
class CudaGroupedGemm : public CudaTest {};

// max |a - b| / max |a|, the two read back from the device.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::fmax(d, std::fabs(double(a[i]) - b[i]));
    s = std::fmax(s, std::fabs(double(a[i])));
  }
  return d / std::fmax(s, 1e-30);
}

TEST_F(CudaGroupedGemm, AgreesWithThePerExpertLoop) {
  const std::vector<int64_t> off = offsets_of(kLoads);
  const int64_t G = static_cast<int64_t>(kLoads.size()), P = off.back(), N = 300, K = 70;
  auto X = to_device(rand(P * K)), dY = to_device(rand(P * N));
  std::vector<cuda::DeviceBuffer<float>> W, dW1, dW2;
  std::vector<const float*> w;
  std::vector<float*> dw1, dw2;
  for (int64_t g = 0; g < G; ++g) {
    W.push_back(to_device(rand(N * K)));
    const std::vector<float> dw0 = rand(N * K);  // accumulated into
    dW1.push_back(to_device(dw0)), dW2.push_back(to_device(dw0));
    w.push_back(W.back().get()), dw1.push_back(dW1.back().get()), dw2.push_back(dW2.back().get());
  }
  auto y1 = poisoned(P * N), y2 = poisoned(P * N), dx1 = poisoned(P * K), dx2 = poisoned(P * K);
  for (int64_t g = 0; g < G; ++g) {  // the loop
    const int64_t r0 = off[g], n = off[g + 1] - r0;
    if (n == 0) continue;
    cuda::gemm_f32(false, true, n, N, K, 1.0f, X.get() + r0 * K, K, w[g], K, 0.0f, y1.get() + r0 * N, N);
    cuda::gemm_f32(false, false, n, K, N, 1.0f, dY.get() + r0 * N, N, w[g], K, 0.0f, dx1.get() + r0 * K, K);
    cuda::gemm_f32(true, false, N, K, n, 1.0f, dY.get() + r0 * N, N, X.get() + r0 * K, K, 1.0f, dw1[g], K);
  }
  cuda::grouped_gemm_forward(G, off.data(), N, K, X.get(), w.data(), y2.get());
  cuda::grouped_gemm_backward_data(G, off.data(), N, K, dY.get(), w.data(), dx2.get());
  cuda::grouped_gemm_backward_weight(G, off.data(), N, K, dY.get(), X.get(), dw2.data());
  EXPECT_LT(rel_diff(to_host(y1), to_host(y2)), 1e-5);
  EXPECT_LT(rel_diff(to_host(dx1), to_host(dx2)), 1e-5);
  for (int64_t g = 0; g < G; ++g) {
    const std::vector<float> a = to_host(dW1[g]), b = to_host(dW2[g]);
    if (kLoads[g] == 0) EXPECT_EQ(a, b) << "an empty expert's gradient changed (expert " << g << ")";
    else EXPECT_LT(rel_diff(a, b), 1e-5) << "expert " << g;
  }
}
#endif

std::vector<float> host_of(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), DType::F32);
  h.copy_from(t);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

struct ExpertRun {
  std::vector<float> out, dx, grads;
};

// The grouped experts of a GELU MoE with biases (experts 2 .. 2 + E - 1 of a larger layer) forward and
// backward on `device`, from the same parameters and inputs whatever the device.
ExpertRun run_experts(Device device, const std::vector<int64_t>& off) {
  const int64_t E = static_cast<int64_t>(off.size()) - 1, P = off.back(), C = 24, F = 40;
  TransformerConfig cfg;
  cfg.hidden_size = C;
  cfg.add_bias_linear = true;
  ParamStore host_store;
  MoEExperts host_experts(host_store, "experts", cfg, Activation::Gelu, E, F, 0.02f, true, 2);
  host_store.finalize();
  host_store.init(77);
  std::vector<float> values(static_cast<size_t>(host_store.numel()));
  host_store.copy_values_to_host(values.data());
  for (float& v : values) v *= 10.0f;  // biases away from zero too (they start at zero)
  for (size_t i = 0; i < values.size(); ++i) values[i] += 0.01f * static_cast<float>(i % 7);

  ParamStore store;
  store.set_device(device);
  MoEExperts experts(store, "experts", cfg, Activation::Gelu, E, F, 0.02f, true, 2);
  store.finalize();
  store.copy_values_from_host(values.data());
  EXPECT_GE(store.find("experts.2.fc1.weight"), 0);
  EXPECT_EQ(store.find("experts.0.fc1.weight"), -1);

  std::vector<float> x = random_vector(P * C, 5), dy = random_vector(P * C, 6);
  Tensor xp = Tensor::empty({P, C}, DType::F32, device), dout = Tensor::empty({P, C}, DType::F32, device);
  xp.copy_from(Tensor::borrow(x.data(), {P, C}, DType::F32));
  dout.copy_from(Tensor::borrow(dy.data(), {P, C}, DType::F32));
  Arena arena(0, device);
  ExpertRun r;
  Tensor out = experts.forward(arena, xp, off);
  r.out = host_of(out);
  Tensor dxp = Tensor::empty({P, C}, DType::F32, device);
  experts.backward(arena, dout, dxp);
  r.dx = host_of(dxp);
  r.grads.resize(static_cast<size_t>(store.numel()));
  store.copy_grads_to_host(r.grads.data());
  return r;
}

void expect_near_all(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(a[i]))) << what << " at " << i;
}

void grouped_experts_follow_the_cpu() {
  const std::vector<int64_t> off = offsets_of({0, 9, 31, 0, 2, 0});
  const ExpertRun cpu = run_experts(Device::CPU, off), dev = run_experts(Device::CUDA, off);
  expect_near_all(cpu.out, dev.out, 1e-4, "out");
  expect_near_all(cpu.dx, dev.dx, 1e-4, "dx");
  expect_near_all(cpu.grads, dev.grads, 1e-4, "parameter gradients");
}

}  // namespace

TEST(CudaGroupedExperts, FollowTheCpuOnAGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device here: the emulated device runs this check instead";
  grouped_experts_follow_the_cpu();
}

// The grouped path's six products (fc1 and fc2 forward; data and weight gradients of each) each one
// grouped call, none per expert.
TEST(CudaGroupedExperts, RunThroughTheGroupedOpsOnTheEmulatedDevice) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: FollowTheCpuOnAGpu runs on it instead";
  EmulatedCudaScope emulated;
  const int64_t before = emulated_grouped_products();
  grouped_experts_follow_the_cpu();
  EXPECT_EQ(emulated_grouped_products() - before, 6);
}

}  // namespace megadlm::test
