// Context parallelism: the micro-batch split (models/context_parallel.h), the attention kernel's
// separate key segment ids, and the ring attention (nn/ring_attention.h) against the whole sequence's
// attention, forward and backward, for every mask kind: in one process (a ring of one rank: the two
// chunks, the pair masks and the merge), and under mpirun -np 2 and -np 4 (ctest mpi_cp_np2,
// mpi_cp_np4: the exchange round the ring).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "core/philox.h"
#include "kernels/backend.h"
#include "models/context_parallel.h"
#include "nn/ring_attention.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "parallel/cp_rows.h"

using namespace megadlm;

namespace {

using test::cp_max_diff;
using test::cp_test_values;

// One attention problem over whole sequences of S tokens, and its reference results from the backend's
// kernel on the whole sequence.
struct Problem {
  int64_t B = 2, S = 0, H = 4, K = 2, D = 8;
  MaskType mask = MaskType::Causal;
  int64_t block = 0;
  std::vector<int32_t> segs;  // [B, S] or empty
  std::vector<float> q, k, v, dout;
  std::vector<float> out, lse, dq, dk, dv;  // reference

  Problem(int64_t seq, MaskType m, int64_t blk, bool documents) : S(seq), mask(m), block(blk) {
    q = cp_test_values(B * S * H * D, 1);
    k = cp_test_values(B * S * K * D, 2);
    v = cp_test_values(B * S * K * D, 3);
    dout = cp_test_values(B * S * H * D, 4);
    if (documents) segs = test::cp_test_documents(B, S);  // uneven documents, a different cut in each sequence
    AttentionMask am;
    am.type = mask;
    am.block_size = block;
    am.segment_ids = segs.empty() ? nullptr : segs.data();
    out.resize(q.size());
    lse.resize(static_cast<size_t>(B * H * S));
    dq.resize(q.size());
    dk.resize(k.size());
    dv.resize(v.size());
    const Backend& be = cpu_backend();
    be.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, S, H, K, D, am, scale());
    be.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                          lse.data(), B, S, H, K, D, am, scale());
  }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
};

// Rank r's rows of a [B, S, W] tensor: chunks r and 2cp-1-r of every sequence.
std::vector<float> rows_of(const std::vector<float>& full, int64_t B, int64_t S, int64_t W, int cp, int r) {
  return test::cp_rows_of(full, B, S, W, cp, r);
}

// The same for the log-sum-exps [B, H, S].
std::vector<float> lse_rows_of(const std::vector<float>& full, int64_t BH, int64_t S, int cp, int r) {
  return rows_of(full, BH, S, 1, cp, r);
}

// This rank's ring attention against the reference rows, forward and backward.
void check_ring(const ParallelContext& ctx, const Problem& p, const std::string& what) {
  SCOPED_TRACE(what + " (cp " + std::to_string(ctx.cp.size) + ", rank " + std::to_string(ctx.cp.rank) + ")");
  const int cp = ctx.cp.size, r = ctx.cp.rank;
  const int64_t T = p.S / cp, HD = p.H * p.D, KD = p.K * p.D;
  const std::vector<float> q = rows_of(p.q, p.B, p.S, HD, cp, r), k = rows_of(p.k, p.B, p.S, KD, cp, r),
                           v = rows_of(p.v, p.B, p.S, KD, cp, r), dout = rows_of(p.dout, p.B, p.S, HD, cp, r);
  RingAttentionArgs a;
  a.B = p.B;
  a.T = T;
  a.H = p.H;
  a.K = p.K;
  a.D = p.D;
  a.mask = p.mask;
  a.block_size = p.block;
  a.sequence_segments = p.segs.empty() ? nullptr : p.segs.data();
  a.scale = p.scale();
  Arena arena(1 << 20);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(p.B * p.H * T)), dq(q.size()), dk(k.size()), dv(v.size());
  ring_attention_forward(arena, ctx, a, out.data(), lse.data(), q.data(), k.data(), v.data());
  EXPECT_LE(cp_max_diff(out, rows_of(p.out, p.B, p.S, HD, cp, r)), 1e-5);
  EXPECT_LE(cp_max_diff(lse, lse_rows_of(p.lse, p.B * p.H, p.S, cp, r)), 1e-5);
  ring_attention_backward(arena, ctx, a, dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                          out.data(), lse.data());
  EXPECT_LE(cp_max_diff(dq, rows_of(p.dq, p.B, p.S, HD, cp, r)), 1e-5);
  EXPECT_LE(cp_max_diff(dk, rows_of(p.dk, p.B, p.S, KD, cp, r)), 1e-5);
  EXPECT_LE(cp_max_diff(dv, rows_of(p.dv, p.B, p.S, KD, cp, r)), 1e-5);
  EXPECT_EQ(arena.mark(), 0u) << "the ring's temporaries are released";
}

// Every mask kind the ring pairs chunks for, on sequences of S tokens.
void check_every_mask(const ParallelContext& ctx, int64_t S) {
  check_ring(ctx, Problem(S, MaskType::Causal, 0, false), "causal");
  check_ring(ctx, Problem(S, MaskType::None, 0, false), "bidirectional");
  check_ring(ctx, Problem(S, MaskType::BlockCausal, S / (2 * ctx.cp.size), false), "block-causal, block = chunk");
  check_ring(ctx, Problem(S, MaskType::BlockCausal, 2, false), "block-causal, block 2");
  check_ring(ctx, Problem(S, MaskType::Causal, 0, true), "causal, documents");
  check_ring(ctx, Problem(S, MaskType::None, 0, true), "bidirectional, documents");
}

// The attention kernel with the keys' segment ids apart from the queries' against a naive double
// reference: key j visible to query i iff seg_q[i] == seg_k[j] (and the position rule).
TEST(ContextParallel, KernelTakesSeparateKeySegmentIds) {
  const int64_t B = 1, T = 12, H = 2, K = 1, D = 4;
  const std::vector<float> q = cp_test_values(B * T * H * D, 11), k = cp_test_values(B * T * K * D, 12),
                           v = cp_test_values(B * T * K * D, 13);
  std::vector<int32_t> sq(T), sk(T);
  for (int64_t i = 0; i < T; ++i) {
    sq[static_cast<size_t>(i)] = static_cast<int32_t>(i / 4);
    sk[static_cast<size_t>(i)] = static_cast<int32_t>((i + 2) / 4);
  }
  for (MaskType m : {MaskType::None, MaskType::Causal}) {
    AttentionMask am;
    am.type = m;
    am.segment_ids = sq.data();
    am.key_segment_ids = sk.data();
    std::vector<float> out(q.size()), lse(static_cast<size_t>(B * H * T));
    const float scale = 0.5f;
    cpu_backend().attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, K, D, am, scale);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s;
        std::vector<int64_t> js;
        for (int64_t j = 0; j < T; ++j) {
          if (sq[static_cast<size_t>(i)] != sk[static_cast<size_t>(j)] || (m == MaskType::Causal && j > i)) continue;
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += static_cast<double>(q[(i * H + h) * D + e]) * k[j * D + e];
          s.push_back(d * scale);
          js.push_back(j);
        }
        if (s.empty()) {
          EXPECT_EQ(lse[h * T + i], -std::numeric_limits<float>::infinity());
          continue;
        }
        double mx = s[0], z = 0;
        for (double x : s) mx = std::max(mx, x);
        for (double x : s) z += std::exp(x - mx);
        EXPECT_NEAR(lse[h * T + i], mx + std::log(z), 1e-5);
        for (int64_t e = 0; e < D; ++e) {
          double o = 0;
          for (size_t n = 0; n < s.size(); ++n) o += std::exp(s[n] - mx) / z * v[js[n] * D + e];
          EXPECT_NEAR(out[(i * H + h) * D + e], o, 1e-5);
        }
      }
  }
}

// Rank r keeps chunks r and 2cp-1-r of every array; the union over ranks is each position once; the
// whole sequences' document ids stay with every rank.
TEST(ContextParallel, MicroBatchKeepsTheLoadBalancedChunks) {
  const int64_t B = 2, T = 8;
  MicroBatch full;
  full.reset(B, T, 0.5f);
  for (int64_t n = 0; n < B * T; ++n) {
    full.tokens[static_cast<size_t>(n)] = static_cast<int32_t>(n);
    full.positions[static_cast<size_t>(n)] = static_cast<int32_t>(n % T);
    full.segment_ids[static_cast<size_t>(n)] = static_cast<int32_t>(n / 3);
    full.targets[static_cast<size_t>(n)] = static_cast<int32_t>(100 + n);
    full.weights[static_cast<size_t>(n)] = static_cast<float>(n);
  }
  const std::vector<std::vector<int32_t>> want = {{0, 1, 6, 7}, {2, 3, 4, 5}};  // cp 2: chunks of 2
  std::vector<int> seen(static_cast<size_t>(B * T), 0);
  for (int r = 0; r < 2; ++r) {
    MicroBatch mb = full;
    keep_context_parallel_rows(mb, 2, r);
    ASSERT_EQ(mb.T, 4);
    ASSERT_EQ(mb.tokens.size(), static_cast<size_t>(B * 4));
    EXPECT_EQ(mb.sequence_segment_ids, full.segment_ids);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < 4; ++i) {
        const int32_t pos = want[static_cast<size_t>(r)][static_cast<size_t>(i)];
        const size_t n = static_cast<size_t>(b * 4 + i), src = static_cast<size_t>(b * T + pos);
        EXPECT_EQ(mb.positions[n], pos);
        EXPECT_EQ(mb.tokens[n], full.tokens[src]);
        EXPECT_EQ(mb.segment_ids[n], full.segment_ids[src]);
        EXPECT_EQ(mb.targets[n], full.targets[src]);
        EXPECT_EQ(mb.weights[n], full.weights[src]);
        ++seen[src];
      }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  MicroBatch same = full;
  keep_context_parallel_rows(same, 1, 0);
  EXPECT_EQ(same.tokens, full.tokens);
  EXPECT_TRUE(same.sequence_segment_ids.empty());
}

TEST(ContextParallel, SequenceLengthMustBeTwoChunksPerRank) {
  EXPECT_NO_THROW(check_context_parallel_length(32, 4));
  try {
    check_context_parallel_length(36, 4);
    FAIL() << "36 tokens cannot be 8 equal chunks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--seq-length 36"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--context-parallel-size 4"), std::string::npos) << e.what();
  }
}

// A ring of one rank: its two chunks are the whole sequence, paired and merged as on a longer ring.
TEST(ContextParallel, RingOfOneRankIsTheWholeAttention) {
  check_every_mask(ParallelContext::single(), 20);
}

// Under mpirun: every rank of the world is one cp rank.
TEST(ContextParallelMpi, RingMatchesTheWholeSequence) {
  if (!launched_by_mpi()) GTEST_SKIP() << "needs mpirun -np 2 or 4 (ctest: mpi_cp_np2, mpi_cp_np4)";
  init_distributed(nullptr, nullptr);
  ParallelLayout layout;
  layout.cp = world_size();
  const ParallelContext ctx = make_parallel_context(layout);
  ASSERT_EQ(ctx.cp.size, world_size());
  check_every_mask(ctx, 8 * ctx.cp.size);  // chunks of 4 rows
}

}  // namespace
