#pragma once
// Internal to the CPU attention kernels (attention.cpp fp32, attention_bf16.cpp bf16 operands): the
// pieces both share, namely tile sizes, the vector helpers and exp2, the mask logic, per-thread scratch,
// argument checks, the online-softmax step and the register-block walk of a tile product.
// Legend: B batch, T sequence, H query heads, K key/value heads, D head dim; TQ/TK query/key tile rows,
// Dp = D rounded up to a multiple of 16 (one AVX-512 register of floats).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/vec16.h"

namespace megadlm::cpu::attn {

constexpr int64_t TQ = 64;  // query rows per tile
constexpr int64_t TK = 64;  // key rows per tile
// Below this many multiply-adds per product (B*H*T*T*D) one thread does the whole call: waking the team
// costs more than it saves. The result does not depend on it (nor on the thread count).
constexpr int64_t kParallelMinWork = int64_t{1} << 22;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The vector helpers (vec16.h).
using vec::exp2v;
using vec::load16;
using vec::splat;
using vec::store16;
using vec::v16;
using vec::vi16;
using vec::vmax;
using vec::vmin;

// ---- register blocking of a tile product -----------------------------------------------------------
// Walks C[rows, W] (W a multiple of 16) in register blocks: column panels of 16 * kMaxNV outside,
// groups of 6 rows inside, so a panel of the right operand stays in L1 while every row group streams
// past it. `block.template operator()<R, NV>(r0, c0)` computes the R x 16*NV block at (r0, c0) (a
// generic lambda, so each kernel brings its own micro-kernel). The block's R*NV accumulators must fit
// the register file with NV operand vectors and a broadcast: with AVX-512 (32 registers of 16 floats)
// 6 x 4 vectors; with AVX2 a 16-float vector is two of its 16 registers (vec16.h), so 6 x 1: 12
// registers of accumulators, where 6 x 4 would need 48. Each output element is one accumulator over k
// in order either way, so the blocking does not change a bit of the result.
#if defined(__AVX512F__)
constexpr int64_t kMaxNV = 4;
#else
constexpr int64_t kMaxNV = 1;
#endif
template <int NV, class Block>
inline void dispatch_rows(int rr, int64_t r0, int64_t c0, Block& block) {
  switch (rr) {
    case 6: block.template operator()<6, NV>(r0, c0); break;
    case 5: block.template operator()<5, NV>(r0, c0); break;
    case 4: block.template operator()<4, NV>(r0, c0); break;
    case 3: block.template operator()<3, NV>(r0, c0); break;
    case 2: block.template operator()<2, NV>(r0, c0); break;
    default: block.template operator()<1, NV>(r0, c0); break;
  }
}

template <class Block>
inline void for_each_register_block(int64_t rows, int64_t W, Block&& block) {
  for (int64_t c0 = 0; c0 < W; c0 += 16 * kMaxNV) {
    const int64_t nv = std::min<int64_t>(kMaxNV, (W - c0) / 16);
    for (int64_t r0 = 0; r0 < rows; r0 += 6) {
      const int rr = static_cast<int>(std::min<int64_t>(6, rows - r0));
      switch (nv) {
        case 4: dispatch_rows<4>(rr, r0, c0, block); break;
        case 3: dispatch_rows<3>(rr, r0, c0, block); break;
        case 2: dispatch_rows<2>(rr, r0, c0, block); break;
        default: dispatch_rows<1>(rr, r0, c0, block); break;
      }
    }
  }
}

// ---- masks -----------------------------------------------------------------------------------------
// How one (query tile, key tile) pair is masked: entirely invisible (skipped), entirely visible, or
// partly, by the position mask (causal / block-causal) and/or by the documents.
struct TileMask {
  bool skip = false;
  bool by_position = false;  // some pair is hidden by the causal / block-causal rule
  bool by_segment = false;   // some pair is hidden by differing segment ids
  bool partial() const { return by_position || by_segment; }
};

// The keys one query sees under the block-diffusion mask: the rows of [begin0, end0) and [begin1, end1).
struct KeyRanges {
  int64_t begin0, end0, begin1, end1;
  // How many of the keys [k0, k1] (inclusive) they hold.
  int64_t count(int64_t k0, int64_t k1) const {
    return std::max<int64_t>(0, std::min(end0, k1 + 1) - std::max(begin0, k0)) +
           std::max<int64_t>(0, std::min(end1, k1 + 1) - std::max(begin1, k0));
  }
  bool contains(int64_t j) const { return (j >= begin0 && j < end0) || (j >= begin1 && j < end1); }
};

// The mask restricted to one batch row b.
struct Visibility {
  MaskType type;
  int64_t block;
  const int32_t* seg;   // [T] the queries' segment ids for this batch row, or null
  const int32_t* kseg;  // [T] the keys' (seg itself unless the mask gives key_segment_ids); null with seg
  int64_t half = 0;     // BlockDiffusion: T / 2, the rows of each copy of the sequence

  // BlockDiffusion: query i's keys. Noised (i < half, block b): noised block b, clean blocks < b;
  // clean (block b): clean blocks <= b. Its keys are not a prefix, so last_key / first_query do not
  // describe this mask: classify and mask_tile test it pair by pair and tile_cut leaves its tiles whole.
  KeyRanges block_diffusion_keys(int64_t i) const {
    if (i < half) {
      const int64_t b = i / block;
      return {b * block, std::min((b + 1) * block, half), half, half + b * block};
    }
    const int64_t b = (i - half) / block;
    return {half, std::min(half + (b + 1) * block, 2 * half), 0, 0};
  }

  // The position rule as ranges, both monotone in the index: query i sees exactly the keys
  // j <= last_key(i), and key j is seen exactly by the queries i >= first_query(j).
  int64_t last_key(int64_t i) const {
    if (type == MaskType::Causal) return i;
    if (type == MaskType::BlockCausal) return (i / block + 1) * block - 1;
    return std::numeric_limits<int64_t>::max();
  }
  int64_t first_query(int64_t j) const {
    if (type == MaskType::Causal) return j;
    if (type == MaskType::BlockCausal) return j / block * block;
    return 0;
  }

  // Block diffusion: whether no query of the tile sees any of its keys, and whether some pair is hidden.
  void classify_block_diffusion(int64_t q0, int64_t nq, int64_t k0, int64_t nk, TileMask& m) const {
    int64_t seen = 0;
    for (int64_t i = q0; i < q0 + nq; ++i) {
      const int64_t c = block_diffusion_keys(i).count(k0, k0 + nk - 1);
      seen += c;
      m.by_position = m.by_position || c < nk;
    }
    m.skip = seen == 0;
  }

  TileMask classify(int64_t q0, int64_t nq, int64_t k0, int64_t nk) const {
    TileMask m;
    const int64_t q1 = q0 + nq - 1, k1 = k0 + nk - 1;  // last rows, inclusive
    if (type == MaskType::BlockDiffusion) {
      classify_block_diffusion(q0, nq, k0, nk, m);
      if (m.skip) return m;
    } else if (k0 > last_key(q1)) {  // even the last query sees none of the keys
      m.skip = true;
      return m;
    } else {
      m.by_position = k1 > last_key(q0);  // the first query misses some key
    }
    if (seg != nullptr) {
      const auto [qmin, qmax] = std::minmax_element(seg + q0, seg + q0 + nq);
      const auto [kmin, kmax] = std::minmax_element(kseg + k0, kseg + k0 + nk);
      if (*qmax < *kmin || *kmax < *qmin) {
        m.skip = true;
        return m;
      }
      m.by_segment = !(*qmin == *qmax && *kmin == *kmax && *qmin == *kmin);
    }
    return m;
  }
};

// Sets the invisible entries of a score tile to -inf, with keys as rows (st[j*ld + i], `keys_by_queries`)
// or queries as rows (s[i*ld + j]). The position rule hides a prefix (resp. suffix) of each row, filled
// as a range; documents need an element-wise comparison. Padding beyond nq / nk is left alone.
inline void mask_tile(float* st, int64_t ld, bool keys_by_queries, const Visibility& vis, const TileMask& tm,
                      int64_t q0, int64_t nq, int64_t k0, int64_t nk) {
  const int64_t rows = keys_by_queries ? nk : nq, cols = keys_by_queries ? nq : nk;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = st + r * ld;
    if (tm.by_position && vis.type == MaskType::BlockDiffusion) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = q0 + (keys_by_queries ? c : r), j = k0 + (keys_by_queries ? r : c);
        if (!vis.block_diffusion_keys(i).contains(j)) row[c] = kNegInf;
      }
    } else if (tm.by_position) {
      if (keys_by_queries) {  // key k0 + r is hidden from queries before first_query
        const int64_t hide = std::clamp<int64_t>(vis.first_query(k0 + r) - q0, 0, cols);
        std::fill(row, row + hide, kNegInf);
      } else {  // query q0 + r sees no key after last_key
        const int64_t show = std::clamp<int64_t>(vis.last_key(q0 + r) - k0 + 1, 0, cols);
        std::fill(row + show, row + cols, kNegInf);
      }
    }
    if (tm.by_segment) {
      const int32_t* other = keys_by_queries ? vis.seg + q0 : vis.kseg + k0;
      const int32_t mine = keys_by_queries ? vis.kseg[k0 + r] : vis.seg[q0 + r];
      for (int64_t c = 0; c < cols; ++c) row[c] = other[c] == mine ? row[c] : kNegInf;
    }
  }
}

// ---- the position mask inside a cut tile --------------------------------------------------------------
// Where the position rule cuts a tile pair (TileMask::by_position, the diagonal tiles of a causal mask),
// whole register blocks of its score tiles are hidden and whole runs of a product's summed index carry
// exact zeros (P and dS are 0 there). The fp32 kernel's products leave both out: a hidden block is
// written with a fill value instead (-inf for scores, which mask_tile writes again; 0 for dP), and a row
// block of P V, dS K, P^T dO or dS^T Q sums over the index range that can be non-zero only. The sums
// keep their order and drop only terms 0 * x, so for finite inputs the results are bitwise those of the
// full products; at T = 256 with 64-row tiles the cut pairs are 4 of the 10 a causal head computes.
struct TileCut {
  const Visibility* vis = nullptr;  // the batch row's mask; null: the tile is not cut
  int64_t q0 = 0, k0 = 0;           // the tile's first query and key (positions in the sequence)

  // Key row j of the tile is hidden from query column i and from every query before it.
  bool hides(int64_t j, int64_t i) const { return k0 + j > vis->last_key(q0 + i); }
  // Rows of queries up to i (local) sum over keys [0, keys_end): the later keys are hidden from them.
  int64_t keys_end(int64_t i, int64_t nk) const { return std::clamp<int64_t>(vis->last_key(q0 + i) - k0 + 1, 0, nk); }
  // Rows of keys from j (local) sum over queries [queries_begin, nq): the earlier queries see none of them.
  int64_t queries_begin(int64_t j, int64_t nq) const { return std::clamp<int64_t>(vis->first_query(k0 + j) - q0, 0, nq); }
};

// The cut of a tile pair: set where the position rule cuts it (TileMask::by_position), else none.
// The block-diffusion mask is never cut this way (its keys are not a prefix): its tiles are computed
// whole and mask_tile hides the pairs.
inline TileCut tile_cut(const Visibility& vis, const TileMask& tm, int64_t q0, int64_t k0) {
  const bool cut = tm.by_position && vis.type != MaskType::BlockDiffusion;
  return TileCut{cut ? &vis : nullptr, q0, k0};
}

// What a product over a cut tile may leave out: the hidden register blocks of a score tile with keys as
// rows (S^T, dP^T) or with queries as rows (S, dP), or the zero terms of a sum over keys (P V, dS K) or
// over queries (P^T dO, dS^T Q).
enum class Cut { None, KeysByQueries, QueriesByKeys, SumOverKeys, SumOverQueries };

// What one register block of such a product computes, rows [r0, r1] and columns [c0, c1] of its tile
// (local): nothing when `hidden` (the caller fills it), else its sum over the index range [begin, end)
// of the n it has. The summed index runs over single keys or queries (`per` = 1: the fp32 kernel) or
// over pairs of them (`per` = 2: the bf16 kernel's operands); a pair is left out only when both of its
// members carry zeros.
struct BlockCut {
  bool hidden = false;
  int64_t begin = 0, end = 0;
};
inline BlockCut cut_block(const TileCut& cut, Cut kind, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t n,
                          int64_t per = 1) {
  BlockCut b{false, 0, n};
  if (cut.vis == nullptr) return b;
  // Score blocks: the first key hidden from the last query.
  b.hidden = (kind == Cut::KeysByQueries && cut.hides(r0, c1)) || (kind == Cut::QueriesByKeys && cut.hides(c0, r1));
  if (kind == Cut::SumOverKeys) b.end = std::min(n, (cut.keys_end(r1, n * per) + per - 1) / per);
  if (kind == Cut::SumOverQueries) b.begin = cut.queries_begin(r0, n * per) / per;
  return b;
}

// The register blocks of a product C [rows, W] over a tile with this cut (none: cut.vis null), walked as
// for_each_register_block does: a hidden block is filled with `fill`, every other one handed to
// block.template operator()<R, NV>(Cb, r0, c0, begin, count): its corner in C, its first row and column,
// and the run of the n summed indices (in units of `per`, see cut_block) it sums over; count 0: no term,
// so an accumulated C keeps its values and a written one gets zeros.
template <class Block>
inline void for_each_kept_block(float* C, int64_t ldc, int64_t rows, int64_t W, int64_t n, int64_t per,
                                const TileCut& cut, Cut kind, float fill, Block&& block) {
  for_each_register_block(rows, W, [&]<int R, int NV>(int64_t r0, int64_t c0) {
    float* Cb = C + r0 * ldc + c0;
    const BlockCut bc = cut_block(cut, kind, r0, r0 + R - 1, c0, c0 + 16 * NV - 1, n, per);
    if (bc.hidden) {
      for (int r = 0; r < R; ++r) std::fill(Cb + r * ldc, Cb + r * ldc + 16 * NV, fill);
      return;
    }
    block.template operator()<R, NV>(Cb, r0, c0, bc.begin, std::max<int64_t>(bc.end - bc.begin, 0));
  });
}

// A block of T or more keys is one block for the whole sequence; clamping keeps last_key from overflowing.
// Under BlockDiffusion the blocks are counted within each half of T / 2 rows.
inline Visibility visibility(const AttentionMask& mask, int64_t b, int64_t T) {
  const int32_t* seg = mask.segment_ids ? mask.segment_ids + b * T : nullptr;
  const int32_t* kseg = mask.key_segment_ids ? mask.key_segment_ids + b * T : seg;
  if (mask.type == MaskType::BlockDiffusion) return Visibility{mask.type, std::min(mask.block_size, T / 2), seg, kseg, T / 2};
  return Visibility{mask.type, std::min(mask.block_size, T), seg, kseg};
}

// ---- per-thread scratch ----------------------------------------------------------------------------
// One 64-byte aligned, zeroed block of floats, carved into tiles.
class Scratch {
 public:
  explicit Scratch(int64_t n)
      : n_(n), p_(static_cast<float*>(::operator new[](n * sizeof(float), std::align_val_t(64)))) {
    std::memset(p_, 0, n * sizeof(float));
  }
  ~Scratch() { ::operator delete[](p_, std::align_val_t(64)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // Next tile of n floats, rounded up to a whole number of cache lines.
  float* take(int64_t n) {
    float* t = p_ + used_;
    used_ += (n + 15) / 16 * 16;
    MEGADLM_CHECK(used_ <= n_, "attention scratch overflow: ", used_, " > ", n_);
    return t;
  }
  // The same for 32-bit words (pairs of bf16); never read back as floats.
  uint32_t* take_words(int64_t n) { return reinterpret_cast<uint32_t*>(take(n)); }

 private:
  int64_t n_, used_ = 0;
  float* p_;
};

// ---- shapes ------------------------------------------------------------------------------------------
struct Shape {
  int64_t B, T, H, K, D, Dp, group, nqt, nkt, qs, ks;  // qs, ks: row strides of q-like and k-like tensors
  bool parallel;                                       // worth an OpenMP team
};

inline Shape check_and_shape(int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                             float scale, const char* who) {
  MEGADLM_CHECK(B >= 0 && T >= 0, who, ": B = ", B, " and T = ", T, " must be >= 0");
  MEGADLM_CHECK(H > 0 && K > 0 && D > 0, who, ": H = ", H, ", K = ", K, ", D = ", D, " must be > 0");
  MEGADLM_CHECK(H % K == 0, who, ": query heads H = ", H, " are not a multiple of kv heads K = ", K);
  MEGADLM_CHECK(mask.type == MaskType::None || mask.type == MaskType::Causal || mask.type == MaskType::BlockCausal ||
                    mask.type == MaskType::BlockDiffusion,
                who, ": unknown mask type ", static_cast<int>(mask.type));
  MEGADLM_CHECK((mask.type != MaskType::BlockCausal && mask.type != MaskType::BlockDiffusion) || mask.block_size > 0,
                who, ": a block mask needs block_size > 0, got ", mask.block_size);
  MEGADLM_CHECK(mask.type != MaskType::BlockDiffusion || T % 2 == 0, who,
                ": BlockDiffusion needs an even T (the noised and the clean half), got T = ", T);
  MEGADLM_CHECK(std::isfinite(scale), who, ": scale = ", scale, " is not finite");
  MEGADLM_CHECK(mask.key_segment_ids == nullptr || mask.segment_ids != nullptr, who,
                ": key_segment_ids without the queries' segment_ids");
  Shape s;
  s.B = B, s.T = T, s.H = H, s.K = K, s.D = D;
  s.Dp = (D + 15) / 16 * 16;
  s.group = H / K;
  s.nqt = (T + TQ - 1) / TQ;
  s.nkt = (T + TK - 1) / TK;
  s.qs = H * D;
  s.ks = K * D;
  s.parallel = B * H * T * T * D >= kParallelMinWork;
  return s;
}

// ---- tasks -------------------------------------------------------------------------------------------
// A task of the forward and of the backward's dq pass: (b, query head h, query tile). Consecutive tasks
// share a head, so its K and V stay in cache; within a head the latest query tiles come first (under a
// causal mask the heaviest), leaving light tasks for the end. g is h's kv head; rows [q0, q0 + nq).
struct QueryTask {
  int64_t b, h, g, q0, nq;
  Visibility vis;
};
inline QueryTask query_task(const Shape& s, const AttentionMask& mask, int64_t task) {
  const int64_t qtile = s.nqt - 1 - task % s.nqt;
  const int64_t b = task / s.nqt / s.H, h = task / s.nqt % s.H, q0 = qtile * TQ;
  return {b, h, h / s.group, q0, std::min(TQ, s.T - q0), visibility(mask, b, s.T)};
}

// A task of the backward's dk/dv pass: (b, kv head g, key tile). Consecutive tasks share a kv head (its
// queries stay in cache); within it the earliest key tiles come first: under a causal mask they are
// seen by the most queries. Rows [k0, k0 + nk).
struct KeyTask {
  int64_t b, g, k0, nk;
  Visibility vis;
};
inline KeyTask key_task(const Shape& s, const AttentionMask& mask, int64_t task) {
  const int64_t ktile = task % s.nkt;
  const int64_t b = task / s.nkt / s.K, k0 = ktile * TK;
  return {b, task / s.nkt % s.K, k0, std::min(TK, s.T - k0), visibility(mask, b, s.T)};
}

// lse (natural log) -> base-2 row offsets; a row that saw no key (lse = -inf) gets +inf so P = 0.
inline void lse_to_log2(float* lse2, const float* lse, int64_t n, int64_t pad_to) {
  for (int64_t i = 0; i < n; ++i) lse2[i] = lse[i] == kNegInf ? kInf : lse[i] * kLog2e;
  for (int64_t i = n; i < pad_to; ++i) lse2[i] = kInf;
}

// ---- the forward's online softmax --------------------------------------------------------------------
// A key tile's step, all TQ queries at once (a vector lane per query), in three parts: the max pass
// (online_softmax_max), the exp pass that turns the scores S^T into P^T = exp2(S^T - msub) and adds them
// to l (each kernel stores P in its own format), and the rescale of what was accumulated so far.

// m ([TQ], running max, base 2) becomes max(m, max over the nk keys of st [TK, TQ]); msub ([TQ]) gets
// what to subtract from the scores (m, or 0 while a query has seen no key, so that exp2 gives 0, not
// NaN) and alpha ([TQ]) the factor exp2(m_old - m_new) for the running sum and the output rows.
inline void online_softmax_max(const float* st, int64_t nk, float* m, float* msub, float* alpha) {
  for (int64_t i = 0; i < TQ; i += 16) {
    v16 mt = splat(kNegInf);
    for (int64_t j = 0; j < nk; ++j) mt = vmax(mt, load16(st + j * TQ + i));
    const v16 m_old = load16(m + i);
    const v16 m_new = vmax(m_old, mt);
    const v16 m_sub = vec::select(m_new == kNegInf, v16{}, m_new);
    store16(alpha + i, exp2v(m_old - m_sub));
    store16(m + i, m_new);
    store16(msub + i, m_sub);
  }
}

// The nq rows of acc ([TQ, Dp], unnormalised outputs) times alpha.
inline void rescale_rows(float* acc, int64_t nq, int64_t Dp, const float* alpha) {
  for (int64_t i = 0; i < nq; ++i) {
    if (alpha[i] == 1.0f) continue;
    for (int64_t d = 0; d < Dp; d += 16) store16(acc + i * Dp + d, load16(acc + i * Dp + d) * alpha[i]);
  }
}

// The whole step with P^T stored in place of S^T in fp32 (st [TK, TQ]); updates m, l ([TQ]) and acc.
inline void online_softmax_step(float* st, int64_t nk, float* m, float* l, float* alpha, float* acc, int64_t nq,
                                int64_t Dp) {
  alignas(64) float msub[TQ];
  online_softmax_max(st, nk, m, msub, alpha);
  for (int64_t i = 0; i < TQ; i += 16) {
    const v16 ms = load16(msub + i);
    v16 sum{};
    for (int64_t j = 0; j < nk; ++j) {
      const v16 p = exp2v(load16(st + j * TQ + i) - ms);
      store16(st + j * TQ + i, p);
      sum += p;
    }
    store16(l + i, load16(l + i) * load16(alpha + i) + sum);
  }
  rescale_rows(acc, nq, Dp, alpha);
}

// The same with the accumulator transposed, accT [Dp, TQ] (a column per query): every row times alpha.
inline void rescale_columns(float* accT, int64_t Dp, const float* alpha) {
  for (int64_t d = 0; d < Dp; ++d)
    for (int64_t i = 0; i < TQ; i += 16) store16(accT + d * TQ + i, load16(accT + d * TQ + i) * load16(alpha + i));
}

// The forward's result for the nq queries of a tile: out rows ([nq, D], row stride `stride`) = acc / l,
// lse ([nq], contiguous) = ln(sum of exp of the scores); a query with no visible key gets 0 and -inf.
// Query i's accumulated element d is acc[i * acc_i + d * acc_d]: acc [TQ, Dp] rows (Dp, 1) or its
// transpose [Dp, TQ] (1, TQ).
inline void finish_query_rows(float* out, int64_t stride, float* lse, const float* acc, int64_t acc_i, int64_t acc_d,
                              const float* m, const float* l, int64_t nq, int64_t D) {
  for (int64_t i = 0; i < nq; ++i) {
    float* o = out + i * stride;
    if (l[i] > 0.0f) {
      const float inv = 1.0f / l[i];
      for (int64_t d = 0; d < D; ++d) o[d] = acc[i * acc_i + d * acc_d] * inv;
      lse[i] = (m[i] + std::log2(l[i])) * kLn2;
    } else {
      for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
      lse[i] = kNegInf;
    }
  }
}

}  // namespace megadlm::cpu::attn
