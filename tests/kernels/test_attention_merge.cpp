// The merge of two attentions over disjoint key sets (kernels/cpu/attention.h's attention_merge, the
// ring attention's combine step): against its formula in double precision, rows with either side or
// both empty (lse -inf) included; and as the ring uses it: the attentions over two halves of the keys
// merged give the attention over all of them. The strided copy the ring moves its chunks with
// (Backend::copy_2d) on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/attention.h"
#include "test_util.h"

using namespace megadlm;
using megadlm::test::random_vector;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(AttentionMerge, MatchesItsFormulaInDouble) {
  const int64_t B = 2, T = 6, H = 3, D = 5;
  std::vector<float> acc_out = random_vector(B * T * H * D, 1), out = random_vector(B * T * H * D, 2);
  std::vector<float> acc_lse = random_vector(B * H * T, 3), lse = random_vector(B * H * T, 4);
  for (size_t i = 0; i < lse.size(); i += 3) lse[i] = -kInf;      // nothing to merge in
  for (size_t i = 0; i < acc_lse.size(); i += 4) acc_lse[i] = -kInf;  // nothing merged yet (i = 0: both)
  std::vector<float> got_out = acc_out, got_lse = acc_lse;
  cpu::attention_merge(got_out.data(), got_lse.data(), out.data(), lse.data(), B, T, H, D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const size_t li = static_cast<size_t>((b * H + h) * T + i);
        const double l1 = acc_lse[li], l2 = lse[li];
        const double l = (l1 == -kInf && l2 == -kInf) ? -kInf : std::log(std::exp(l1) + std::exp(l2));
        if (l == -kInf) EXPECT_EQ(got_lse[li], -kInf);
        else EXPECT_NEAR(got_lse[li], l, 1e-6);
        for (int64_t d = 0; d < D; ++d) {
          const size_t o = static_cast<size_t>(((b * T + i) * H + h) * D + d);
          const double want = l == -kInf ? acc_out[o] : std::exp(l1 - l) * acc_out[o] + std::exp(l2 - l) * out[o];
          EXPECT_NEAR(got_out[o], want, 1e-6) << "b " << b << " h " << h << " i " << i << " d " << d;
        }
      }
}

// Keys split by their document ids into two sets: queries of document 0 see set 0, of document 1 set
// 1 (AttentionMask::key_segment_ids); the two results merged are the attention over every key.
TEST(AttentionMerge, TwoHalvesOfTheKeysMergeIntoTheWhole) {
  const int64_t B = 2, T = 12, H = 4, K = 2, D = 8;
  const std::vector<float> q = random_vector(B * T * H * D, 5), k = random_vector(B * T * K * D, 6),
                           v = random_vector(B * T * K * D, 7);
  std::vector<int32_t> key_set(static_cast<size_t>(B * T)), zeros(key_set.size(), 0), ones(key_set.size(), 1);
  for (size_t j = 0; j < key_set.size(); ++j) key_set[j] = static_cast<int32_t>((j * 7 / 3) % 2);
  const float scale = 0.35f;
  auto attend = [&](const std::vector<int32_t>* queries, std::vector<float>& out, std::vector<float>& lse) {
    AttentionMask m;
    m.type = MaskType::None;
    if (queries) {
      m.segment_ids = queries->data();
      m.key_segment_ids = key_set.data();
    }
    out.assign(q.size(), 0.0f);
    lse.assign(static_cast<size_t>(B * H * T), 0.0f);
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, K, D, m, scale);
  };
  std::vector<float> whole_out, whole_lse, out0, lse0, out1, lse1;
  attend(nullptr, whole_out, whole_lse);
  attend(&zeros, out0, lse0);
  attend(&ones, out1, lse1);
  cpu_backend().attention_merge(out0.data(), lse0.data(), out1.data(), lse1.data(), B, T, H, D);
  for (size_t i = 0; i < whole_lse.size(); ++i) EXPECT_NEAR(lse0[i], whole_lse[i], 1e-5);
  for (size_t i = 0; i < whole_out.size(); ++i) EXPECT_NEAR(out0[i], whole_out[i], 1e-5);
}

TEST(BackendCopy2d, CopiesRowsBetweenPitches) {
  const size_t rows = 3, src_pitch = 40, dst_pitch = 24, width = 20;
  std::vector<unsigned char> src(rows * src_pitch), dst(rows * dst_pitch, 0xAB);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  cpu_backend().copy_2d(dst.data(), dst_pitch, src.data() + 8, src_pitch, width, rows);
  for (size_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < dst_pitch; ++i)
      EXPECT_EQ(dst[r * dst_pitch + i], i < width ? src[r * src_pitch + 8 + i] : 0xAB) << "row " << r << " byte " << i;
}

}  // namespace
