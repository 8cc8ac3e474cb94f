// CUDA flash-style attention (kernels/cuda/attention.cu) forward and backward against a double-precision
// softmax reference, for every mask type (bidirectional, causal, block-causal, packed documents), GQA,
// head dims 32 / 64 / 128, awkward sequence lengths, fp32 and bf16.
#include <cmath>

#include "cuda/attention_reference.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cpu/decode_attention.h"

#ifndef MEGADLM_HAVE_CUDA
MEGADLM_CUDA_NOT_BUILT_TEST(CudaAttention)
#else

namespace megadlm::test {
namespace {

const char* impl_name(cuda::AttentionImpl i) {
  return i == cuda::AttentionImpl::Flash ? "flash" : (i == cuda::AttentionImpl::Gemm ? "gemm" : "auto");
}

template <typename T>
class CudaAttention : public CudaTest {
 protected:
  // Every case through both implementations (the cuBLASLt one only where T % 8 == 0, its supported range).
  void check(const Shape& s, AttentionMask mask, bool segments) {
    check_impl(s, mask, segments, cuda::AttentionImpl::Flash);
    if (s.T % 8 == 0) check_impl(s, mask, segments, cuda::AttentionImpl::Gemm);
  }
  void check_impl(const Shape& s, AttentionMask mask, bool segments, cuda::AttentionImpl impl) {
    const ImplScope scope(impl);
    const auto [B, Tn, H, K, D] = s;
    SCOPED_TRACE(::testing::Message() << impl_name(impl) << " B=" << B << " T=" << Tn << " H=" << H << " K=" << K
                                      << " D=" << D << " mask=" << int(mask.type) << " block=" << mask.block_size
                                      << " segments=" << segments);
    const auto q = Act<T>::seen(this->rand(B * Tn * H * D, -2.0f, 2.0f));
    const auto k = Act<T>::seen(this->rand(B * Tn * K * D, -2.0f, 2.0f));
    const auto v = Act<T>::seen(this->rand(B * Tn * K * D));
    const auto dout = Act<T>::seen(this->rand(B * Tn * H * D));
    std::vector<int32_t> seg;
    cuda::DeviceBuffer<int32_t> dseg;
    if (segments) {
      // Documents of random lengths packed in each row; the first token of row 1 starts a new one.
      seg.resize(B * Tn);
      const auto u = this->rand(B * Tn, 0.0f, 1.0f);
      for (int64_t b = 0; b < B; ++b) {
        int32_t id = 0;
        for (int64_t t = 0; t < Tn; ++t) {
          if (t > 0 && u[b * Tn + t] < 0.12f) ++id;
          seg[b * Tn + t] = id;
        }
      }
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
    const auto got_out = Act<T>::down(out);
    EXPECT_LT(max_rel_error(got_out.data(), ref.out.data(), ref.out.size()), tol) << "out";
    const auto got_lse = to_host(lse);
    for (size_t i = 0; i < got_lse.size(); ++i) {
      if (ref.lse[i] == -INFINITY) ASSERT_EQ(got_lse[i], -INFINITY) << "lse " << i;
      else ASSERT_NEAR(got_lse[i], ref.lse[i], 1e-4 * (1 + std::fabs(ref.lse[i]))) << "lse " << i;
    }
    auto dq = Act<T>::poison(B * Tn * H * D), dk = Act<T>::poison(B * Tn * K * D), dv = Act<T>::poison(B * Tn * K * D);
    cuda::attention_backward(dq.get(), dk.get(), dv.get(), ddout.get(), dq_in.get(), dk_in.get(), dv_in.get(), out.get(),
                             lse.get(), B, Tn, H, K, D, mask, static_cast<float>(scale));
    // bf16: the backward also sees the bf16-rounded forward output (through delta), hence the wider bound.
    const double btol = std::is_same_v<T, float> ? 1e-4 : 4 * tol;
    EXPECT_LT(max_rel_error(Act<T>::down(dq).data(), ref.dq.data(), ref.dq.size()), btol) << "dq";
    EXPECT_LT(max_rel_error(Act<T>::down(dk).data(), ref.dk.data(), ref.dk.size()), btol) << "dk";
    EXPECT_LT(max_rel_error(Act<T>::down(dv).data(), ref.dv.data(), ref.dv.size()), btol) << "dv";
  }
};
using Precisions = ::testing::Types<float, bf16_t>;
TYPED_TEST_SUITE(CudaAttention, Precisions);

TYPED_TEST(CudaAttention, EveryMaskWithGqa) {
  for (const Shape& s : {Shape{2, 45, 4, 2, 64}, Shape{2, 48, 4, 2, 64}}) {
  this->check(s, mask_of(MaskType::None), false);
  this->check(s, mask_of(MaskType::Causal), false);
  this->check(s, mask_of(MaskType::BlockCausal, 7), false);
  this->check(s, mask_of(MaskType::None), true);
  this->check(s, mask_of(MaskType::Causal), true);
  this->check(s, mask_of(MaskType::BlockCausal, 5), true);
  }
}

TYPED_TEST(CudaAttention, HeadDims) {
  this->check(Shape{1, 70, 2, 2, 128}, mask_of(MaskType::Causal), false);
  this->check(Shape{1, 72, 2, 2, 128}, mask_of(MaskType::Causal), false);
  this->check(Shape{3, 33, 6, 2, 32}, mask_of(MaskType::None), false);
  this->check(Shape{1, 9, 3, 1, 64}, mask_of(MaskType::BlockCausal, 100), false);  // block > T
  this->check(Shape{2, 16, 3, 1, 64}, mask_of(MaskType::BlockCausal, 100), true);
}

// Block diffusion's [x_t ; x_0] layout (T even; the kernels see any key as a possible one).
TYPED_TEST(CudaAttention, BlockDiffusionMask) {
  this->check(Shape{2, 48, 4, 2, 64}, mask_of(MaskType::BlockDiffusion, 4), false);
  this->check(Shape{1, 70, 2, 1, 32}, mask_of(MaskType::BlockDiffusion, 6), false);
  this->check(Shape{2, 64, 4, 2, 128}, mask_of(MaskType::BlockDiffusion, 8), true);
}

// D = 48: only the cuBLASLt path takes it (the flash kernel supports 32 / 64 / 128).
TYPED_TEST(CudaAttention, GemmPathAnyHeadDim) {
  this->check_impl(Shape{2, 40, 4, 1, 48}, mask_of(MaskType::Causal), true, cuda::AttentionImpl::Gemm);
}

// Attention against a KV cache (decode_attention.cu) against the CPU kernel: a prefill of several rows
// and one-row decodes, causal and full, GQA, head dims 64 and 128 and an odd one, sequences at different
// offsets in a cache with unused rows (poisoned: a read past a sequence's visible rows would show).
class CudaDecodeAttention : public CudaTest {};

TEST_F(CudaDecodeAttention, MatchesTheCpuKernel) {
  struct Case { int64_t B, Tn, S, H, K, D; std::vector<int64_t> offsets; };
  const Case cases[] = {{2, 1, 40, 4, 2, 64, {17, 39}}, {3, 5, 33, 6, 3, 128, {0, 9, 28}}, {1, 7, 20, 2, 1, 40, {4}}};
  for (const Case& c : cases)
    for (const bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "B=" << c.B << " Tn=" << c.Tn << " S=" << c.S << " H=" << c.H << " K="
                                        << c.K << " D=" << c.D << " causal=" << causal);
      const auto q = rand(c.B * c.Tn * c.H * c.D, -2.0f, 2.0f);
      auto kc = rand(c.B * c.S * c.K * c.D, -2.0f, 2.0f), vc = rand(c.B * c.S * c.K * c.D);
      for (int64_t b = 0; b < c.B; ++b)  // rows no query of b sees
        for (int64_t s = c.offsets[b] + c.Tn; s < c.S; ++s)
          for (int64_t e = 0; e < c.K * c.D; ++e) kc[(b * c.S + s) * c.K * c.D + e] = vc[(b * c.S + s) * c.K * c.D + e] = NAN;
      auto dq = to_device(q), dk = to_device(kc), dv = to_device(vc);
      auto doff = to_device(c.offsets);
      auto out = poisoned(q.size());
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      cuda::decode_attention_forward(out.get(), dq.get(), dk.get(), dv.get(), doff.get(), c.B, c.Tn, c.S, c.H, c.K, c.D,
                                     causal, scale);
      std::vector<float> ref(q.size());
      cpu::decode_attention_forward(ref.data(), q.data(), kc.data(), vc.data(), c.offsets.data(), c.B, c.Tn, c.S, c.H,
                                    c.K, c.D, causal, scale);
      EXPECT_LT(rel_err(to_host(out), ref), 2e-5);
    }
  EXPECT_THROW(cuda::decode_attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 4, 2, 2, 320, true, 1.0f),
               Error);
}

TEST(CudaAttentionArgs, RejectsUnsupportedHeadDim) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  AttentionMask m;
  const ImplScope flash(cuda::AttentionImpl::Flash);
  EXPECT_THROW(cuda::attention_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 2, 2, 48, m, 1.0f),
               Error);
  EXPECT_THROW(cuda::attention_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 3, 2, 64, m, 1.0f),
               Error);
}

}  // namespace
}  // namespace megadlm::test

#endif  // MEGADLM_HAVE_CUDA
