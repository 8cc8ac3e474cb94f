// Context parallelism's pieces on a device: the two backend ops the ring adds (attention_merge,
// copy_2d) on a GPU against the CPU's, and the ring attention of one rank on the device against the
// same ring on the CPU, on a GPU or, where none is visible, on the emulated device (emulated_device.h),
// where the kernels are the CPU's and the results must be bit for bit the CPU ring's. Two ranks:
// test_cuda_parallel.cpp's RingAttentionFollowsTheCpu.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "emulated_device.h"
#include "kernels/dispatch.h"
#include "ring_check.h"

namespace megadlm::test {
namespace {

TEST(CudaRingAttention, RingOfOneFollowsTheCpuOnAGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device here: the emulated device runs this check instead";
  ring_on_device_matches_the_cpu(Device::CUDA, ParallelContext::single(), 1e-4);
}

TEST(CudaRingAttention, RingOfOneIsTheCpuRingOnTheEmulatedDevice) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: RingOfOneFollowsTheCpuOnAGpu runs on it instead";
  EmulatedCudaScope emulated;
  ring_on_device_matches_the_cpu(Device::CUDA, ParallelContext::single(), 0.0);
}

#ifdef MEGADLM_HAVE_CUDA
// The merge on a GPU against the CPU's, with rows of each kind: both sides finite, only one side
// finite (either), neither; and the strided copy of [B, c, W] halves out of [B, T, W].
TEST(CudaRingAttention, MergeAndStridedCopyFollowTheCpuOnAGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device here (the CPU's ops: tests/kernels/test_attention_merge.cpp)";
  const int64_t B = 2, T = 5, H = 3, D = 40;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> acc_out = cp_test_values(B * T * H * D, 1), out = cp_test_values(B * T * H * D, 2);
  std::vector<float> acc_lse = cp_test_values(B * H * T, 3), lse = cp_test_values(B * H * T, 4);
  for (size_t i = 0; i < lse.size(); i += 3) lse[i] = -inf;
  for (size_t i = 1; i < acc_lse.size(); i += 4) acc_lse[i] = -inf;
  std::vector<float> want_out = acc_out, want_lse = acc_lse;
  cpu_backend().attention_merge(want_out.data(), want_lse.data(), out.data(), lse.data(), B, T, H, D);
  const Backend& be = backend_for(Device::CUDA);
  auto d_acc_out = to_device(acc_out), d_acc_lse = to_device(acc_lse), d_out = to_device(out), d_lse = to_device(lse);
  be.attention_merge(d_acc_out.get(), d_acc_lse.get(), d_out.get(), d_lse.get(), B, T, H, D);
  EXPECT_LE(cp_max_diff(to_host(d_acc_out), want_out), 1e-6);
  EXPECT_LE(cp_max_diff(to_host(d_acc_lse), want_lse), 1e-6);

  const int64_t W = 7, c = 2;
  const std::vector<float> src = cp_test_values(B * T * W, 5);
  auto d_src = to_device(src);
  auto d_dst = poisoned(static_cast<size_t>(B * c * W));
  be.copy_2d(d_dst.get(), sizeof(float) * c * W, d_src.get() + 3 * W, sizeof(float) * T * W, sizeof(float) * c * W,
             static_cast<size_t>(B));
  const std::vector<float> got = to_host(d_dst);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < c * W; ++i) EXPECT_EQ(got[b * c * W + i], src[(b * T + 3) * W + i]);
}
#endif

}  // namespace
}  // namespace megadlm::test
