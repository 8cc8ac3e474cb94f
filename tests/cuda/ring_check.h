#pragma once
// The ring attention (nn/ring_attention.h) on a device against the same ring on the CPU: this rank's
// rows, forward and backward, for every mask kind the ring pairs chunks for. The device run keeps its
// tensors in a device arena and exchanges over ctx.cp's device communicator (its MPI one on the CPU).
// Shared by the one-process case (a ring of one: the chunk copies, pair masks, merges and uploaded
// document ids on the device) and the two-rank case under mpirun (the exchange too).
// Legend: B batch, T = 2c local rows, H query heads, K kv heads, D head dim, S = T * cp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "kernels/backend.h"
#include "nn/ring_attention.h"
#include "parallel/cp_rows.h"

namespace megadlm::test {

// The ring's outputs on one device: out, lse, dq, dk, dv, read back to the host.
struct RingResults {
  std::vector<float> out, lse, dq, dk, dv;
};

inline RingResults run_ring(Device device, const ParallelContext& ctx, const RingAttentionArgs& a,
                            const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                            const std::vector<float>& dout) {
  const Backend& be = backend_for(device);
  Arena arena(1 << 20, device);
  auto up = [&](const std::vector<float>& h) {
    float* d = arena.tensor({static_cast<int64_t>(h.size())}).data<float>();
    be.copy_to_device(d, h.data(), sizeof(float) * h.size());
    return d;
  };
  auto down = [&](const float* d, size_t n) {
    std::vector<float> h(n);
    be.copy_to_host(h.data(), d, sizeof(float) * n);
    return h;
  };
  const float *dq_in = up(q), *dk_in = up(k), *dv_in = up(v), *ddout = up(dout);
  const size_t nq = q.size(), nk = k.size(), nl = static_cast<size_t>(a.B * a.H * a.T);
  float* out = arena.tensor({static_cast<int64_t>(nq)}).data<float>();
  float* lse = arena.tensor({static_cast<int64_t>(nl)}).data<float>();
  float* dq = arena.tensor({static_cast<int64_t>(nq)}).data<float>();
  float* dk = arena.tensor({static_cast<int64_t>(nk)}).data<float>();
  float* dv = arena.tensor({static_cast<int64_t>(nk)}).data<float>();
  const size_t mark = arena.mark();
  ring_attention_forward(arena, ctx, a, out, lse, dq_in, dk_in, dv_in);
  ring_attention_backward(arena, ctx, a, dq, dk, dv, ddout, dq_in, dk_in, dv_in, out, lse);
  EXPECT_EQ(arena.mark(), mark) << "the ring's temporaries are released";
  return {down(out, nq), down(lse, nl), down(dq, nq), down(dk, nk), down(dv, nk)};
}

// This rank's ring on `device` (ctx.cp's device communicator) within `tol` of the CPU's.
inline void ring_on_device_matches_the_cpu(Device device, const ParallelContext& ctx, double tol) {
  const int64_t B = 2, T = 16, H = 4, K = 2, D = 8, S = T * ctx.cp.size;
  struct Case {
    const char* name;
    MaskType mask;
    int64_t block;
    bool documents;
  };
  const Case cases[] = {{"causal", MaskType::Causal, 0, false},
                        {"bidirectional", MaskType::None, 0, false},
                        {"block-causal, block 4", MaskType::BlockCausal, 4, false},
                        {"causal, documents", MaskType::Causal, 0, true},
                        {"bidirectional, documents", MaskType::None, 0, true}};
  const uint64_t seed = 100 + 10 * static_cast<uint64_t>(ctx.cp.rank);
  const std::vector<float> q = cp_test_values(B * T * H * D, seed), k = cp_test_values(B * T * K * D, seed + 1),
                           v = cp_test_values(B * T * K * D, seed + 2), dout = cp_test_values(B * T * H * D, seed + 3);
  const std::vector<int32_t> segs = cp_test_documents(B, S);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " (cp " + std::to_string(ctx.cp.size) + ", rank " +
                 std::to_string(ctx.cp.rank) + ")");
    RingAttentionArgs a;
    a.B = B, a.T = T, a.H = H, a.K = K, a.D = D;
    a.mask = c.mask;
    a.block_size = c.block;
    a.sequence_segments = c.documents ? segs.data() : nullptr;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    const RingResults cpu = run_ring(Device::CPU, ctx, a, q, k, v, dout);
    const RingResults dev = run_ring(device, ctx, a, q, k, v, dout);
    EXPECT_LE(cp_max_diff(dev.out, cpu.out), tol);
    EXPECT_LE(cp_max_diff(dev.lse, cpu.lse), tol);
    EXPECT_LE(cp_max_diff(dev.dq, cpu.dq), tol);
    EXPECT_LE(cp_max_diff(dev.dk, cpu.dk), tol);
    EXPECT_LE(cp_max_diff(dev.dv, cpu.dv), tol);
  }
}

}  // namespace megadlm::test
