#include "nn/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace megadlm {

namespace {

constexpr int kTagKV = 0x6b76;   // keys and values going round the ring
constexpr int kTagDKV = 0x646b;  // their gradients, one step behind
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Ring {
  int cp, rank, next, prev;
  int64_t c;  // rows per chunk
};

Ring ring_of(const ParallelContext& ctx, const RingAttentionArgs& a) {
  MEGADLM_CHECK(a.T % 2 == 0, "ring attention: the local rows per sequence (", a.T, ") must be two chunks");
  const int cp = ctx.cp.size, r = ctx.cp.rank;
  return Ring{cp, r, (r + 1) % cp, (r + cp - 1) % cp, a.T / 2};
}

// Rows [half*c, (half+1)*c) of every sequence: src [B, T, W] <-> dst [B, c, W] (the log-sum-exps
// [B, H, T] as B*H sequences of W = 1).
void take_half(float* dst, const float* src, int64_t B, int64_t T, int64_t c, int64_t W, int half) {
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(dst + b * c * W, src + (b * T + half * c) * W, sizeof(float) * static_cast<size_t>(c * W));
}
void put_half(float* dst, const float* src, int64_t B, int64_t T, int64_t c, int64_t W, int half) {
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(dst + (b * T + half * c) * W, src + b * c * W, sizeof(float) * static_cast<size_t>(c * W));
}
// The document ids of chunk x of every sequence: [B, c] out of [B, 2cp*c].
void chunk_segments(int32_t* dst, const int32_t* seq, int64_t B, int64_t S, int64_t c, int64_t x) {
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(dst + b * c, seq + b * S + x * c, sizeof(int32_t) * static_cast<size_t>(c));
}

// How query chunk qx sees key chunk kx (both 0 .. 2cp-1); false: not at all.
bool pair_mask(const RingAttentionArgs& a, int64_t qx, int64_t kx, AttentionMask& m) {
  m = AttentionMask{};
  if (qx == kx) {
    m.type = a.mask;
    m.block_size = a.block_size;
    return true;
  }
  m.type = MaskType::None;
  return qx > kx || a.mask == MaskType::None;
}

// acc (out [B,c,H,D], lse [B,H,c]) <- the attention over the keys of both, from the partial results
// over disjoint key sets: out = sum_i exp(lse_i - lse) out_i, lse = log sum_i exp(lse_i). A part that
// saw no key (lse -inf, out 0) leaves acc as it is.
void merge(float* acc_out, float* acc_lse, const float* out, const float* lse, int64_t B, int64_t c, int64_t H,
           int64_t D) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < c; ++i) {
        const int64_t li = (b * H + h) * c + i;
        const float l2 = lse[li];
        if (l2 == kNegInf) continue;
        float* o1 = acc_out + (b * c + i) * H * D + h * D;
        const float* o2 = out + (b * c + i) * H * D + h * D;
        const float l1 = acc_lse[li];
        if (l1 == kNegInf) {
          std::memcpy(o1, o2, sizeof(float) * static_cast<size_t>(D));
          acc_lse[li] = l2;
          continue;
        }
        const float mx = std::max(l1, l2);
        const float l = mx + std::log(std::exp(l1 - mx) + std::exp(l2 - mx));
        const float w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
        for (int64_t d = 0; d < D; ++d) o1[d] = w1 * o1[d] + w2 * o2[d];
        acc_lse[li] = l;
      }
}

void add_into(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// The per-chunk pieces of one rank: its query-side chunks and the segment ids of every chunk.
struct Chunks {
  const Ring& ring;
  const RingAttentionArgs& a;
  Arena& arena;
  std::vector<int32_t> segs;  // [2cp][B, c] when the sequences carry document ids

  Chunks(const Ring& r, const RingAttentionArgs& args, Arena& ar) : ring(r), a(args), arena(ar) {
    if (a.sequence_segments == nullptr) return;
    const int64_t S = 2 * ring.cp * ring.c, n = a.B * ring.c;
    segs.resize(static_cast<size_t>(2 * ring.cp * n));
    for (int64_t x = 0; x < 2 * ring.cp; ++x) chunk_segments(segs.data() + x * n, a.sequence_segments, a.B, S, ring.c, x);
  }
  // A [B, c, W] half of a [B, T, W] tensor, copied out.
  float* half(const float* src, int64_t W, int h) {
    float* t = static_cast<float*>(arena.allocate(sizeof(float) * static_cast<size_t>(a.B * ring.c * W)));
    take_half(t, src, a.B, a.T, ring.c, W, h);
    return t;
  }
  // The mask of query chunk qx against key chunk kx, with their document ids; false: skip the pair.
  bool mask(int64_t qx, int64_t kx, AttentionMask& m) const {
    if (!pair_mask(a, qx, kx, m)) return false;
    if (!segs.empty()) {
      const int64_t n = a.B * ring.c;
      m.segment_ids = segs.data() + qx * n;
      m.key_segment_ids = segs.data() + kx * n;
    }
    return true;
  }
  // For each of owner's key halves kh that some query half of this rank sees: load(kh) once, then
  // pair(qh, kh, mask) for each such query half qh, and done(kh).
  template <class Load, class Pair, class Done>
  void for_each_pair(int owner, Load&& load, Pair&& pair, Done&& done) const {
    for (int kh = 0; kh < 2; ++kh) {
      bool loaded = false;
      for (int qh = 0; qh < 2; ++qh) {
        AttentionMask m;
        if (!mask(context_chunk(ring.cp, ring.rank, qh), context_chunk(ring.cp, owner, kh), m)) continue;
        if (!loaded) load(kh);
        loaded = true;
        pair(qh, kh, m);
      }
      if (loaded) done(kh);
    }
  }
};

}  // namespace

void ring_attention_forward(Arena& arena, const ParallelContext& ctx, const RingAttentionArgs& a, float* out,
                            float* lse, const float* q, const float* k, const float* v) {
  const Ring ring = ring_of(ctx, a);
  const int64_t B = a.B, T = a.T, H = a.H, K = a.K, D = a.D, c = ring.c;
  const int64_t KD = K * D, HD = H * D, kv = B * T * KD;  // kv: floats of this rank's keys (or values)
  const Backend& be = cpu_backend();
  Communicator& comm = ctx.cp.communicator();
  const size_t mark = arena.mark();
  Chunks chunks(ring, a, arena);

  float* kv_cur = arena.tensor({2 * kv}).data<float>();  // [keys; values] of the owner this step
  float* kv_nxt = arena.tensor({2 * kv}).data<float>();
  std::memcpy(kv_cur, k, sizeof(float) * static_cast<size_t>(kv));
  std::memcpy(kv_cur + kv, v, sizeof(float) * static_cast<size_t>(kv));
  float* qc[2] = {chunks.half(q, HD, 0), chunks.half(q, HD, 1)};
  float* acc_out[2];
  float* acc_lse[2];
  for (int h = 0; h < 2; ++h) {
    acc_out[h] = arena.zeros({B * c * HD}).data<float>();
    acc_lse[h] = arena.tensor({B * H * c}).data<float>();
    std::fill(acc_lse[h], acc_lse[h] + B * H * c, kNegInf);
  }
  float* kc = arena.tensor({B * c * KD}).data<float>();
  float* vc = arena.tensor({B * c * KD}).data<float>();
  float* part_out = arena.tensor({B * c * HD}).data<float>();
  float* part_lse = arena.tensor({B * H * c}).data<float>();

  const int64_t bytes = static_cast<int64_t>(sizeof(float)) * 2 * kv;
  for (int s = 0; s < ring.cp; ++s) {
    const int owner = (ring.rank - s + ring.cp) % ring.cp;
    CommRequest req;
    if (s + 1 < ring.cp) req = comm.send_recv_async(kv_cur, bytes, ring.next, kv_nxt, bytes, ring.prev, kTagKV);
    chunks.for_each_pair(
        owner,
        [&](int kh) {
          take_half(kc, kv_cur, B, T, c, KD, kh);
          take_half(vc, kv_cur + kv, B, T, c, KD, kh);
        },
        [&](int qh, int, const AttentionMask& m) {
          be.attention_forward(part_out, part_lse, qc[qh], kc, vc, B, c, H, K, D, m, a.scale);
          merge(acc_out[qh], acc_lse[qh], part_out, part_lse, B, c, H, D);
        },
        [](int) {});
    comm.wait(req);
    std::swap(kv_cur, kv_nxt);
  }
  for (int h = 0; h < 2; ++h) {
    put_half(out, acc_out[h], B, T, c, HD, h);
    put_half(lse, acc_lse[h], B * H, T, c, 1, h);
  }
  arena.release(mark);
}

void ring_attention_backward(Arena& arena, const ParallelContext& ctx, const RingAttentionArgs& a, float* dq,
                             float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                             const float* out, const float* lse) {
  const Ring ring = ring_of(ctx, a);
  const int64_t B = a.B, T = a.T, H = a.H, K = a.K, D = a.D, c = ring.c;
  const int64_t KD = K * D, HD = H * D, kv = B * T * KD;
  const Backend& be = cpu_backend();
  Communicator& comm = ctx.cp.communicator();
  const size_t mark = arena.mark();
  Chunks chunks(ring, a, arena);

  float* kv_cur = arena.tensor({2 * kv}).data<float>();
  float* kv_nxt = arena.tensor({2 * kv}).data<float>();
  float* dkv_cur = arena.zeros({2 * kv}).data<float>();  // [dk; dv] accumulated for the owner of kv_cur
  float* dkv_nxt = arena.tensor({2 * kv}).data<float>();
  std::memcpy(kv_cur, k, sizeof(float) * static_cast<size_t>(kv));
  std::memcpy(kv_cur + kv, v, sizeof(float) * static_cast<size_t>(kv));
  float* qc[2] = {chunks.half(q, HD, 0), chunks.half(q, HD, 1)};
  float* doc[2] = {chunks.half(dout, HD, 0), chunks.half(dout, HD, 1)};
  float* oc[2] = {chunks.half(out, HD, 0), chunks.half(out, HD, 1)};
  float* lc[2];
  float* dq_acc[2];
  for (int h = 0; h < 2; ++h) {
    lc[h] = arena.tensor({B * H * c}).data<float>();
    take_half(lc[h], lse, B * H, T, c, 1, h);
    dq_acc[h] = arena.zeros({B * c * HD}).data<float>();
  }
  float* kc = arena.tensor({B * c * KD}).data<float>();
  float* vc = arena.tensor({B * c * KD}).data<float>();
  float* dkc = arena.tensor({B * c * KD}).data<float>();
  float* dvc = arena.tensor({B * c * KD}).data<float>();
  float* dq_part = arena.tensor({B * c * HD}).data<float>();
  float* dk_part = arena.tensor({B * c * KD}).data<float>();
  float* dv_part = arena.tensor({B * c * KD}).data<float>();

  const int64_t bytes = static_cast<int64_t>(sizeof(float)) * 2 * kv;
  for (int s = 0; s < ring.cp; ++s) {
    const int owner = (ring.rank - s + ring.cp) % ring.cp;
    CommRequest req_kv;
    if (s + 1 < ring.cp) req_kv = comm.send_recv_async(kv_cur, bytes, ring.next, kv_nxt, bytes, ring.prev, kTagKV);
    chunks.for_each_pair(
        owner,
        [&](int kh) {
          take_half(kc, kv_cur, B, T, c, KD, kh);
          take_half(vc, kv_cur + kv, B, T, c, KD, kh);
          take_half(dkc, dkv_cur, B, T, c, KD, kh);
          take_half(dvc, dkv_cur + kv, B, T, c, KD, kh);
        },
        [&](int qh, int, const AttentionMask& m) {
          be.attention_backward(dq_part, dk_part, dv_part, doc[qh], qc[qh], kc, vc, oc[qh], lc[qh], B, c, H, K, D,
                                m, a.scale);
          add_into(dq_acc[qh], dq_part, B * c * HD);
          add_into(dkc, dk_part, B * c * KD);
          add_into(dvc, dv_part, B * c * KD);
        },
        [&](int kh) {
          put_half(dkv_cur, dkc, B, T, c, KD, kh);
          put_half(dkv_cur + kv, dvc, B, T, c, KD, kh);
        });
    // This owner's gradients go on to the next rank, which holds its keys and values next step; after
    // the last step they arrive at the owner.
    CommRequest req_d = comm.send_recv_async(dkv_cur, bytes, ring.next, dkv_nxt, bytes, ring.prev, kTagDKV);
    comm.wait(req_kv);
    comm.wait(req_d);
    std::swap(kv_cur, kv_nxt);
    std::swap(dkv_cur, dkv_nxt);
  }
  for (int h = 0; h < 2; ++h) put_half(dq, dq_acc[h], B, T, c, HD, h);
  std::memcpy(dk, dkv_cur, sizeof(float) * static_cast<size_t>(kv));
  std::memcpy(dv, dkv_cur + kv, sizeof(float) * static_cast<size_t>(kv));
  arena.release(mark);
}

}  // namespace megadlm
