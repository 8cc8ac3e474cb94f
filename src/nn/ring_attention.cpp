#include "nn/ring_attention.h"

#include <cstring>
#include <utility>
#include <vector>

namespace megadlm {

namespace {

constexpr int kTagKV = 0x6b76;   // keys and values going round the ring
constexpr int kTagDKV = 0x646b;  // their gradients, one step behind

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
// [B, H, T] as B*H sequences of W = 1), on the backend's device.
void take_half(const Backend& be, float* dst, const float* src, int64_t B, int64_t T, int64_t c, int64_t W, int half) {
  const size_t row = sizeof(float) * static_cast<size_t>(c * W);
  be.copy_2d(dst, row, src + half * c * W, sizeof(float) * static_cast<size_t>(T * W), row, static_cast<size_t>(B));
}
void put_half(const Backend& be, float* dst, const float* src, int64_t B, int64_t T, int64_t c, int64_t W, int half) {
  const size_t row = sizeof(float) * static_cast<size_t>(c * W);
  be.copy_2d(dst + half * c * W, sizeof(float) * static_cast<size_t>(T * W), src, row, row, static_cast<size_t>(B));
}
// The document ids of chunk x of every sequence: [B, c] out of [B, 2cp*c] (host).
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

// The per-chunk pieces of one rank: its query-side chunks and the segment ids of every chunk, on the
// arena's device.
struct Chunks {
  const Ring& ring;
  const RingAttentionArgs& a;
  Arena& arena;
  const Backend& be;
  const int32_t* segs = nullptr;  // [2cp][B, c] when the sequences carry document ids

  Chunks(const Ring& r, const RingAttentionArgs& args, Arena& ar, const Backend& backend)
      : ring(r), a(args), arena(ar), be(backend) {
    if (a.sequence_segments == nullptr) return;
    const int64_t S = 2 * ring.cp * ring.c, n = a.B * ring.c;
    std::vector<int32_t> host(static_cast<size_t>(2 * ring.cp * n));
    for (int64_t x = 0; x < 2 * ring.cp; ++x) chunk_segments(host.data() + x * n, a.sequence_segments, a.B, S, ring.c, x);
    int32_t* dev = arena.tensor({2 * ring.cp * n}, DType::I32).data<int32_t>();
    be.copy_to_device(dev, host.data(), sizeof(int32_t) * host.size());
    segs = dev;
  }
  // A [B, c, W] half of a [B, T, W] tensor, copied out.
  float* half(const float* src, int64_t W, int h) {
    float* t = arena.tensor({a.B * ring.c * W}).data<float>();
    take_half(be, t, src, a.B, a.T, ring.c, W, h);
    return t;
  }
  // The mask of query chunk qx against key chunk kx, with their document ids; false: skip the pair.
  bool mask(int64_t qx, int64_t kx, AttentionMask& m) const {
    if (!pair_mask(a, qx, kx, m)) return false;
    if (segs != nullptr) {
      const int64_t n = a.B * ring.c;
      m.segment_ids = segs + qx * n;
      m.key_segment_ids = segs + kx * n;
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
  const Backend& be = backend_for(arena.device());
  Communicator& comm = ctx.cp.communicator(arena.device());
  const size_t mark = arena.mark();
  Chunks chunks(ring, a, arena, be);

  float* kv_cur = arena.tensor({2 * kv}).data<float>();  // [keys; values] of the owner this step
  float* kv_nxt = arena.tensor({2 * kv}).data<float>();
  be.copy(kv_cur, k, sizeof(float) * static_cast<size_t>(kv));
  be.copy(kv_cur + kv, v, sizeof(float) * static_cast<size_t>(kv));
  float* qc[2] = {chunks.half(q, HD, 0), chunks.half(q, HD, 1)};
  // Each query half's running result: its first visible pair writes it, the later ones merge into it.
  float* acc_out[2];
  float* acc_lse[2];
  bool started[2] = {false, false};
  for (int h = 0; h < 2; ++h) {
    acc_out[h] = arena.tensor({B * c * HD}).data<float>();
    acc_lse[h] = arena.tensor({B * H * c}).data<float>();
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
          take_half(be, kc, kv_cur, B, T, c, KD, kh);
          take_half(be, vc, kv_cur + kv, B, T, c, KD, kh);
        },
        [&](int qh, int, const AttentionMask& m) {
          if (!started[qh]) {
            be.attention_forward(acc_out[qh], acc_lse[qh], qc[qh], kc, vc, B, c, H, K, D, m, a.scale);
            started[qh] = true;
            return;
          }
          be.attention_forward(part_out, part_lse, qc[qh], kc, vc, B, c, H, K, D, m, a.scale);
          be.attention_merge(acc_out[qh], acc_lse[qh], part_out, part_lse, B, c, H, D);
        },
        [](int) {});
    comm.wait(req);
    std::swap(kv_cur, kv_nxt);
  }
  // Every query half sees its own chunk at step 0, so both were started.
  MEGADLM_CHECK(started[0] && started[1], "ring attention: a query chunk saw no key chunk");
  for (int h = 0; h < 2; ++h) {
    put_half(be, out, acc_out[h], B, T, c, HD, h);
    put_half(be, lse, acc_lse[h], B * H, T, c, 1, h);
  }
  arena.release(mark);
}

void ring_attention_backward(Arena& arena, const ParallelContext& ctx, const RingAttentionArgs& a, float* dq,
                             float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                             const float* out, const float* lse) {
  const Ring ring = ring_of(ctx, a);
  const int64_t B = a.B, T = a.T, H = a.H, K = a.K, D = a.D, c = ring.c;
  const int64_t KD = K * D, HD = H * D, kv = B * T * KD;
  const Backend& be = backend_for(arena.device());
  Communicator& comm = ctx.cp.communicator(arena.device());
  const size_t mark = arena.mark();
  Chunks chunks(ring, a, arena, be);

  float* kv_cur = arena.tensor({2 * kv}).data<float>();
  float* kv_nxt = arena.tensor({2 * kv}).data<float>();
  float* dkv_cur = arena.zeros({2 * kv}).data<float>();  // [dk; dv] accumulated for the owner of kv_cur
  float* dkv_nxt = arena.tensor({2 * kv}).data<float>();
  be.copy(kv_cur, k, sizeof(float) * static_cast<size_t>(kv));
  be.copy(kv_cur + kv, v, sizeof(float) * static_cast<size_t>(kv));
  float* qc[2] = {chunks.half(q, HD, 0), chunks.half(q, HD, 1)};
  float* doc[2] = {chunks.half(dout, HD, 0), chunks.half(dout, HD, 1)};
  float* oc[2] = {chunks.half(out, HD, 0), chunks.half(out, HD, 1)};
  float* lc[2];
  float* dq_acc[2];
  for (int h = 0; h < 2; ++h) {
    lc[h] = arena.tensor({B * H * c}).data<float>();
    take_half(be, lc[h], lse, B * H, T, c, 1, h);
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
          take_half(be, kc, kv_cur, B, T, c, KD, kh);
          take_half(be, vc, kv_cur + kv, B, T, c, KD, kh);
          take_half(be, dkc, dkv_cur, B, T, c, KD, kh);
          take_half(be, dvc, dkv_cur + kv, B, T, c, KD, kh);
        },
        [&](int qh, int, const AttentionMask& m) {
          be.attention_backward(dq_part, dk_part, dv_part, doc[qh], qc[qh], kc, vc, oc[qh], lc[qh], B, c, H, K, D,
                                m, a.scale);
          be.add_inplace(dq_acc[qh], dq_part, B * c * HD);
          be.add_inplace(dkc, dk_part, B * c * KD);
          be.add_inplace(dvc, dv_part, B * c * KD);
        },
        [&](int kh) {
          put_half(be, dkv_cur, dkc, B, T, c, KD, kh);
          put_half(be, dkv_cur + kv, dvc, B, T, c, KD, kh);
        });
    // This owner's gradients go on to the next rank, which holds its keys and values next step; after
    // the last step they arrive at the owner (on a ring of one they are already there).
    if (ring.cp > 1) {
      CommRequest req_d = comm.send_recv_async(dkv_cur, bytes, ring.next, dkv_nxt, bytes, ring.prev, kTagDKV);
      comm.wait(req_kv);
      comm.wait(req_d);
      std::swap(kv_cur, kv_nxt);
      std::swap(dkv_cur, dkv_nxt);
    }
  }
  for (int h = 0; h < 2; ++h) put_half(be, dq, dq_acc[h], B, T, c, HD, h);
  be.copy(dk, dkv_cur, sizeof(float) * static_cast<size_t>(kv));
  be.copy(dv, dkv_cur + kv, sizeof(float) * static_cast<size_t>(kv));
  arena.release(mark);
}

}  // namespace megadlm
