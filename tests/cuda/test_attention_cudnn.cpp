// AttentionImpl::Cudnn (kernels/cuda/attention_cudnn.cpp, cuDNN's fused SDPA) forward and backward against a
// double-precision softmax reference: bf16, bidirectional and causal, GQA and plain multi-head, head dims
// 64 and 128, sequence lengths on and off cuDNN's tile size; and the fallbacks (block-causal and document
// masks, fp32) that the Cudnn setting hands to the other implementations. Skips without a device or when
// the build has no cuDNN frontend.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda/attention_reference.h"
#include "cuda/cuda_test_util.h"

#ifndef MEGADLM_HAVE_CUDA
MEGADLM_CUDA_NOT_BUILT_TEST(CudnnAttention)
#else

namespace megadlm::test {
namespace {

class CudnnAttention : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    if (!cuda::attention_cudnn_compiled())
      GTEST_SKIP() << "this build has no cuDNN frontend (MEGADLM_HAVE_CUDNN_FRONTEND undefined: CMake found no "
                      "cudnn_frontend.h or libcudnn, see docs/cuda.md): cuDNN attention tests skipped";
    if (cuda::compute_capability() < 80)
      GTEST_SKIP() << "cuDNN's fused bf16 attention needs sm_80 or newer; this device is sm_"
                   << cuda::compute_capability();
  }

  // Forward (out, lse) and backward (dq, dk, dv) of one case against the reference. T = bf16_t or float.
  template <typename T>
  void check(const Shape& s, AttentionMask mask, const std::vector<int32_t>& seg = {}) {
    const ImplScope scope(cuda::AttentionImpl::Cudnn);
    const auto [B, Tn, H, K, D] = s;
    SCOPED_TRACE(::testing::Message() << (std::is_same_v<T, float> ? "fp32" : "bf16") << " B=" << B << " T=" << Tn
                                      << " H=" << H << " K=" << K << " D=" << D << " mask=" << int(mask.type)
                                      << " block=" << mask.block_size << " segments=" << !seg.empty());
    const auto q = Act<T>::seen(rand(B * Tn * H * D, -2.0f, 2.0f));
    const auto k = Act<T>::seen(rand(B * Tn * K * D, -2.0f, 2.0f));
    const auto v = Act<T>::seen(rand(B * Tn * K * D));
    const auto dout = Act<T>::seen(rand(B * Tn * H * D));
    cuda::DeviceBuffer<int32_t> dseg;
    if (!seg.empty()) {
      dseg = to_device(seg);
      mask.segment_ids = dseg.get();
    }
    const double scale = 1.0 / std::sqrt(double(D));
    const Ref ref = reference(s, mask, seg, q, k, v, dout, scale);

    auto dq_in = Act<T>::up(q), dk_in = Act<T>::up(k), dv_in = Act<T>::up(v), ddout = Act<T>::up(dout);
    auto out = Act<T>::poison(B * Tn * H * D);
    auto lse = poisoned(B * H * Tn);
    cuda::attention_forward(out.get(), lse.get(), dq_in.get(), dk_in.get(), dv_in.get(), B, Tn, H, K, D, mask,
                            static_cast<float>(scale));
    const double tol = Act<T>::tol();
    EXPECT_LT(max_rel_error(Act<T>::down(out).data(), ref.out.data(), ref.out.size()), tol) << "out";
    // lse is fp32 from exact bf16 products: cuDNN's natural-log statistics must match ours closely (a
    // base-2 or unscaled lse would be off by tens of percent).
    const auto got_lse = to_host(lse);
    for (size_t i = 0; i < got_lse.size(); ++i) {
      if (ref.lse[i] == -INFINITY) ASSERT_EQ(got_lse[i], -INFINITY) << "lse " << i;
      else ASSERT_NEAR(got_lse[i], ref.lse[i], 5e-4 * (1 + std::fabs(ref.lse[i]))) << "lse " << i;
    }
    auto dq = Act<T>::poison(B * Tn * H * D), dk = Act<T>::poison(B * Tn * K * D), dv = Act<T>::poison(B * Tn * K * D);
    cuda::attention_backward(dq.get(), dk.get(), dv.get(), ddout.get(), dq_in.get(), dk_in.get(), dv_in.get(),
                             out.get(), lse.get(), B, Tn, H, K, D, mask, static_cast<float>(scale));
    // bf16: gradients see the bf16-rounded output (delta) and bf16 probabilities in the products.
    const double btol = std::is_same_v<T, float> ? 1e-4 : 4 * tol;
    EXPECT_LT(max_rel_error(Act<T>::down(dq).data(), ref.dq.data(), ref.dq.size()), btol) << "dq";
    EXPECT_LT(max_rel_error(Act<T>::down(dk).data(), ref.dk.data(), ref.dk.size()), btol) << "dk";
    EXPECT_LT(max_rel_error(Act<T>::down(dv).data(), ref.dv.data(), ref.dv.size()), btol) << "dv";
  }

  std::vector<int32_t> documents(int64_t B, int64_t Tn) {
    std::vector<int32_t> seg(B * Tn);
    const auto u = rand(B * Tn, 0.0f, 1.0f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0, id = 0; t < Tn; ++t) seg[b * Tn + t] = static_cast<int32_t>(id += (t > 0 && u[b * Tn + t] < 0.1f));
    return seg;
  }
};

// Few distinct shapes: each one costs cuDNN a graph build (with run-time compiled kernels) per direction.
TEST_F(CudnnAttention, BidirectionalGqa) {
  check<bf16_t>(Shape{2, 77, 4, 1, 64}, mask_of(MaskType::None));  // T off cuDNN's 64-row tiles
  check<bf16_t>(Shape{1, 96, 4, 2, 128}, mask_of(MaskType::None));
}

TEST_F(CudnnAttention, CausalGqa) {
  check<bf16_t>(Shape{1, 83, 6, 2, 64}, mask_of(MaskType::Causal));
  check<bf16_t>(Shape{2, 72, 2, 1, 128}, mask_of(MaskType::Causal));
}

TEST_F(CudnnAttention, MultiHeadNoGqa) {
  check<bf16_t>(Shape{1, 128, 3, 3, 128}, mask_of(MaskType::Causal));
}

// The Cudnn setting hands what cuDNN lacks to the other implementations; the results must still be right.
TEST_F(CudnnAttention, FallbacksForOtherMasksAndFp32) {
  check<bf16_t>(Shape{2, 48, 4, 2, 64}, mask_of(MaskType::BlockCausal, 7));
  check<bf16_t>(Shape{2, 48, 4, 2, 64}, mask_of(MaskType::Causal), documents(2, 48));
  check<float>(Shape{2, 40, 4, 2, 64}, mask_of(MaskType::Causal));
}

// Calls that alternate between cached graphs (the shapes above) on fresh inputs: a graph bound to stale
// sizes or pointers would give wrong numbers.
TEST_F(CudnnAttention, GraphCacheAcrossShapes) {
  check<bf16_t>(Shape{1, 83, 6, 2, 64}, mask_of(MaskType::Causal));
  check<bf16_t>(Shape{2, 77, 4, 1, 64}, mask_of(MaskType::None));
  check<bf16_t>(Shape{1, 83, 6, 2, 64}, mask_of(MaskType::Causal));
}

}  // namespace
}  // namespace megadlm::test

#endif  // MEGADLM_HAVE_CUDA
