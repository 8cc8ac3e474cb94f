// Memory-efficient attention on CPU: flash-attention 2's algorithm with tiles sized for the L1/L2 caches.
// Legend: B batch, T sequence, H query heads, K key/value heads, D head dim; TQ/TK query/key tile rows,
// Dp = D rounded up to a multiple of 16 (one AVX-512 register of floats).
//
// Forward, one task per (b, h, query tile): for each visible key tile, S^T = K_tile Q_tile^T, an online
// softmax update of the running max m and sum l (held per query, as vectors), then O += P V. Nothing
// larger than a tile is ever materialised.
//
// Backward, recomputing P from lse (flash-attention 2), in two passes that each own what they write, so
// there is no race and no float reduction whose order depends on the thread count:
//   dq pass, one task per (b, h, query tile):      dQ  = scale * dS K          over the key tiles
//   dk/dv pass, one task per (b, kv head, key tile): dV = P^T dO, dK = scale * dS^T Q
//                                                    over the H/K heads sharing the kv head and the query tiles
// with P = exp(S - lse), delta_i = dout_i . out_i, dS = P * (dO V^T - delta). Both passes recompute S and
// dP (7 tile products instead of 5), the price of determinism without atomics or per-tile dq buffers.
//
// All tile products go through one register-blocked micro-kernel written with GCC vector extensions
// (16 floats per vector: AVX-512 FMAs under -march=native, split into narrower vectors on other CPUs).
// Every product is arranged so that its vectorised operand is either a row of the inputs (read in place)
// or a tile transposed once per task (Q^T per query tile, K^T and V^T per key tile), never once per
// (query tile, key tile) pair.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "core/error.h"

namespace megadlm::cpu {

namespace {

constexpr int64_t TQ = 64;  // query rows per tile
constexpr int64_t TK = 64;  // key rows per tile
// Below this many multiply-adds per product (B*H*T*T*D) one thread does the whole call: waking the team
// costs more than it saves. The result does not depend on it (nor on the thread count).
constexpr int64_t kParallelMinWork = int64_t{1} << 22;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The vector helpers below are internal to this file, so the ABI of passing 64-byte vectors by value on
// CPUs without AVX-512 (what -Wpsabi warns about) does not matter.
#pragma GCC diagnostic ignored "-Wpsabi"
using v16 = float __attribute__((vector_size(64)));
using vi16 = int32_t __attribute__((vector_size(64)));
// Unaligned, aliasing views for loads and stores from plain float arrays.
using v16u = float __attribute__((vector_size(64), aligned(4), may_alias));

inline v16 load16(const float* p) { return *reinterpret_cast<const v16u*>(p); }
inline void store16(float* p, v16 x) { *reinterpret_cast<v16u*>(p) = x; }
inline v16 splat(float s) { return v16{s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s}; }
inline v16 vmax(v16 a, v16 b) { return a > b ? a : b; }
inline v16 vmin(v16 a, v16 b) { return a < b ? a : b; }

// 2^x for x <= 0 (scores minus a running max), exactly 0 below 2^-126 so that a masked score (-inf)
// contributes nothing. Range reduction x = n + r, |r| <= 1/2, then a degree-5 polynomial for 2^r
// (coefficients fitted for relative error on [-1/2, 1/2]: at most 7.5e-8, under one float ulp).
inline v16 exp2v(v16 x) {
  const vi16 keep = x >= -126.0f;
  x = vmin(vmax(x, splat(-126.0f)), splat(127.0f));
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  const v16 t = x + shifter;
  const v16 r = x - (t - shifter);
  // The low bits of t hold n; shifted into the exponent field with its bias they make 2^n.
  const v16 pow2n = (v16)(((vi16)t - (0x4B400000 - 127)) << 23);
  v16 p = splat(1.3276465e-03f);
  p = p * r + 9.6755419e-03f;
  p = p * r + 5.5507135e-02f;
  p = p * r + 2.4022120e-01f;
  p = p * r + 6.9314694e-01f;
  p = p * r + 1.0000001e+00f;
  return (v16)((vi16)(p * pow2n) & keep);
}

// ---- the tile product ------------------------------------------------------------------------------
// C[r, 0:16*NV] (+)= sum_k A[r*ars + k*aks] * Bm[k*ldb + 0:16*NV] for r < R, k < kd.
// A is read one scalar at a time (broadcast), so it may be any strided view, transposed or not; Bm's
// rows are vectors. R*NV accumulators stay in registers for the whole k loop.
template <int R, int NV>
inline void micro_kernel(float* C, int64_t ldc, const float* A, int64_t ars, int64_t aks, const float* Bm,
                         int64_t ldb, int64_t kd, bool accumulate) {
  v16 c[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? load16(C + r * ldc + 16 * v) : v16{};
  for (int64_t k = 0; k < kd; ++k) {
    v16 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = load16(Bm + k * ldb + 16 * v);
    const float* a = A + k * aks;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const v16 ar = splat(a[r * ars]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[r][v] += ar * b[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) store16(C + r * ldc + 16 * v, c[r][v]);
}

template <int NV>
inline void micro_kernel_rows(int rows, float* C, int64_t ldc, const float* A, int64_t ars, int64_t aks,
                              const float* Bm, int64_t ldb, int64_t kd, bool accumulate) {
  switch (rows) {
    case 6: micro_kernel<6, NV>(C, ldc, A, ars, aks, Bm, ldb, kd, accumulate); break;
    case 5: micro_kernel<5, NV>(C, ldc, A, ars, aks, Bm, ldb, kd, accumulate); break;
    case 4: micro_kernel<4, NV>(C, ldc, A, ars, aks, Bm, ldb, kd, accumulate); break;
    case 3: micro_kernel<3, NV>(C, ldc, A, ars, aks, Bm, ldb, kd, accumulate); break;
    case 2: micro_kernel<2, NV>(C, ldc, A, ars, aks, Bm, ldb, kd, accumulate); break;
    default: micro_kernel<1, NV>(C, ldc, A, ars, aks, Bm, ldb, kd, accumulate); break;
  }
}

// C[rows, W] (+)= A[rows, kd] @ Bm[kd, W], W a multiple of 16; A element (r, k) at A[r*ars + k*aks].
// Column chunks of 64 (4 vectors) outside, groups of 6 rows inside, so a 64-wide panel of Bm
// (kd x 256 bytes) stays in L1 while every row group streams past it.
void tile_product(float* C, int64_t ldc, const float* A, int64_t ars, int64_t aks, const float* Bm, int64_t ldb,
                  int64_t rows, int64_t kd, int64_t W, bool accumulate) {
  for (int64_t c0 = 0; c0 < W; c0 += 64) {
    const int64_t nv = std::min<int64_t>(4, (W - c0) / 16);
    for (int64_t r0 = 0; r0 < rows; r0 += 6) {
      const int rr = static_cast<int>(std::min<int64_t>(6, rows - r0));
      float* Cp = C + r0 * ldc + c0;
      const float* Ap = A + r0 * ars;
      const float* Bp = Bm + c0;
      switch (nv) {
        case 4: micro_kernel_rows<4>(rr, Cp, ldc, Ap, ars, aks, Bp, ldb, kd, accumulate); break;
        case 3: micro_kernel_rows<3>(rr, Cp, ldc, Ap, ars, aks, Bp, ldb, kd, accumulate); break;
        case 2: micro_kernel_rows<2>(rr, Cp, ldc, Ap, ars, aks, Bp, ldb, kd, accumulate); break;
        default: micro_kernel_rows<1>(rr, Cp, ldc, Ap, ars, aks, Bp, ldb, kd, accumulate); break;
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

// The mask restricted to one batch row b.
struct Visibility {
  MaskType type;
  int64_t block;
  const int32_t* seg;  // [T] for this batch row, or null

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

  TileMask classify(int64_t q0, int64_t nq, int64_t k0, int64_t nk) const {
    TileMask m;
    const int64_t q1 = q0 + nq - 1, k1 = k0 + nk - 1;  // last rows, inclusive
    if (k0 > last_key(q1)) {  // even the last query sees none of the keys
      m.skip = true;
      return m;
    }
    m.by_position = k1 > last_key(q0);  // the first query misses some key
    if (seg != nullptr) {
      const auto [qmin, qmax] = std::minmax_element(seg + q0, seg + q0 + nq);
      const auto [kmin, kmax] = std::minmax_element(seg + k0, seg + k0 + nk);
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
void mask_tile(float* st, int64_t ld, bool keys_by_queries, const Visibility& vis, const TileMask& tm, int64_t q0,
               int64_t nq, int64_t k0, int64_t nk) {
  const int64_t rows = keys_by_queries ? nk : nq, cols = keys_by_queries ? nq : nk;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = st + r * ld;
    if (tm.by_position) {
      if (keys_by_queries) {  // key k0 + r is hidden from queries before first_query
        const int64_t hide = std::clamp<int64_t>(vis.first_query(k0 + r) - q0, 0, cols);
        std::fill(row, row + hide, kNegInf);
      } else {  // query q0 + r sees no key after last_key
        const int64_t show = std::clamp<int64_t>(vis.last_key(q0 + r) - k0 + 1, 0, cols);
        std::fill(row + show, row + cols, kNegInf);
      }
    }
    if (tm.by_segment) {
      const int32_t* other = vis.seg + (keys_by_queries ? q0 : k0);
      const int32_t mine = vis.seg[(keys_by_queries ? k0 : q0) + r];
      for (int64_t c = 0; c < cols; ++c) row[c] = other[c] == mine ? row[c] : kNegInf;
    }
  }
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
    MDLM_CHECK(used_ <= n_, "attention scratch overflow: ", used_, " > ", n_);
    return t;
  }

 private:
  int64_t n_, used_ = 0;
  float* p_;
};

// dst[d*ldd + i] = mul * src[i*stride + d] for i < n, d < D; columns n..ldd zeroed (padding rows of the
// tile). `mul` folds the softmax scale (in base 2) into the operand, so score tiles need no scaling pass.
void transpose_rows(float* dst, int64_t ldd, const float* src, int64_t stride, int64_t n, int64_t D,
                    float mul = 1.0f) {
  for (int64_t i = 0; i < n; ++i) {
    const float* s = src + i * stride;
    for (int64_t d = 0; d < D; ++d) dst[d * ldd + i] = mul * s[d];
  }
  for (int64_t d = 0; d < D; ++d)
    for (int64_t i = n; i < ldd; ++i) dst[d * ldd + i] = 0.0f;
}

// n rows of D floats (row stride `stride`) as the right operand of a product of width Dp: read in place
// when D is already a multiple of 16, else copied into `pad` ([n, Dp], zero beyond D).
const float* row_operand(const float* src, int64_t stride, int64_t n, int64_t D, int64_t Dp, float* pad,
                         int64_t* ld) {
  if (D == Dp) {
    *ld = stride;
    return src;
  }
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(pad + i * Dp, src + i * stride, D * sizeof(float));
    std::memset(pad + i * Dp + D, 0, (Dp - D) * sizeof(float));
  }
  *ld = Dp;
  return pad;
}

struct Shape {
  int64_t B, T, H, K, D, Dp, group, nqt, nkt, qs, ks;  // qs, ks: row strides of q-like and k-like tensors
  bool parallel;                                       // worth an OpenMP team
};

Shape check_and_shape(int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask,
                      float scale, const char* who) {
  MDLM_CHECK(B >= 0 && T >= 0, who, ": B = ", B, " and T = ", T, " must be >= 0");
  MDLM_CHECK(H > 0 && K > 0 && D > 0, who, ": H = ", H, ", K = ", K, ", D = ", D, " must be > 0");
  MDLM_CHECK(H % K == 0, who, ": query heads H = ", H, " are not a multiple of kv heads K = ", K);
  MDLM_CHECK(mask.type == MaskType::None || mask.type == MaskType::Causal || mask.type == MaskType::BlockCausal,
             who, ": unknown mask type ", static_cast<int>(mask.type));
  MDLM_CHECK(mask.type != MaskType::BlockCausal || mask.block_size > 0, who,
             ": BlockCausal needs block_size > 0, got ", mask.block_size);
  MDLM_CHECK(std::isfinite(scale), who, ": scale = ", scale, " is not finite");
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

// A block of T or more keys is one block for the whole sequence; clamping keeps last_key from overflowing.
Visibility visibility(const AttentionMask& mask, int64_t b, int64_t T) {
  return Visibility{mask.type, std::min(mask.block_size, T), mask.segment_ids ? mask.segment_ids + b * T : nullptr};
}

// delta[i] = dout_i . out_i for the n rows of one tile (0 in the padding rows up to `pad_to`).
void row_dots(float* delta, const float* dout, const float* out, int64_t stride, int64_t n, int64_t D,
              int64_t pad_to) {
  for (int64_t i = 0; i < n; ++i) {
    const float* a = dout + i * stride;
    const float* o = out + i * stride;
    v16 acc{};
    int64_t d = 0;
    for (; d + 16 <= D; d += 16) acc += load16(a + d) * load16(o + d);
    float s = 0.0f;
    for (int l = 0; l < 16; ++l) s += acc[l];
    for (; d < D; ++d) s += a[d] * o[d];
    delta[i] = s;
  }
  for (int64_t i = n; i < pad_to; ++i) delta[i] = 0.0f;
}

// lse (natural log) -> base-2 row offsets; a row that saw no key (lse = -inf) gets +inf so P = 0.
void lse_to_log2(float* lse2, const float* lse, int64_t n, int64_t pad_to) {
  for (int64_t i = 0; i < n; ++i) lse2[i] = lse[i] == kNegInf ? kInf : lse[i] * kLog2e;
  for (int64_t i = n; i < pad_to; ++i) lse2[i] = kInf;
}

}  // namespace

// ---- forward ---------------------------------------------------------------------------------------
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int64_t B,
                       int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask, float scale) {
  const Shape s = check_and_shape(B, T, H, K, D, mask, scale, "attention_forward");
  if (B == 0 || T == 0) return;
  const int64_t Dp = s.Dp;
  const float c = scale * kLog2e;  // scores are kept in base 2: exp(x) = exp2(x log2 e)
  const int64_t ntasks = s.nqt * B * H;

#pragma omp parallel if (s.parallel)
  {
    Scratch scratch(D * TQ + TK * TQ + TQ * Dp + TK * Dp + 4 * TQ + 64);
    float* qt = scratch.take(D * TQ);    // [D, TQ]  Q tile transposed, times c
    float* st = scratch.take(TK * TQ);   // [TK, TQ] S^T, then P^T
    float* acc = scratch.take(TQ * Dp);  // [TQ, Dp] unnormalised output rows
    float* vpad = scratch.take(TK * Dp); // [TK, Dp] V tile, when D is not a multiple of 16
    float* m = scratch.take(TQ);         // [TQ] running max (base 2)
    float* l = scratch.take(TQ);         // [TQ] running sum of exp2(s - m)
    float* alpha = scratch.take(TQ);     // [TQ] rescale factor of this key tile

#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; ++task) {
      // Consecutive tasks share a head, so its K and V stay in cache; within a head the latest query
      // tiles come first (under a causal mask the heaviest), leaving light tasks for the end.
      const int64_t qtile = s.nqt - 1 - task % s.nqt;
      const int64_t b = task / s.nqt / H, h = task / s.nqt % H, g = h / s.group;
      const int64_t q0 = qtile * TQ, nq = std::min(TQ, T - q0);
      const Visibility vis = visibility(mask, b, T);
      const float* qb = q + (b * T + q0) * s.qs + h * D;  // [nq, D] rows, stride H*D

      transpose_rows(qt, TQ, qb, s.qs, nq, D, c);
      std::fill(acc, acc + TQ * Dp, 0.0f);
      std::fill(m, m + TQ, kNegInf);
      std::fill(l, l + TQ, 0.0f);

      for (int64_t ktile = 0; ktile < s.nkt; ++ktile) {
        const int64_t k0 = ktile * TK, nk = std::min(TK, T - k0);
        const TileMask tm = vis.classify(q0, nq, k0, nk);
        if (tm.skip) continue;
        const float* kb = k + (b * T + k0) * s.ks + g * D;  // [nk, D] rows, stride K*D
        const float* vb = v + (b * T + k0) * s.ks + g * D;

        // S^T[j, i] = c * k_j . q_i, the score in base 2.
        tile_product(st, TQ, kb, s.ks, 1, qt, TQ, nk, D, TQ, false);
        if (tm.partial()) mask_tile(st, TQ, true, vis, tm, q0, nq, k0, nk);

        // Online softmax, all TQ queries at once (a vector lane per query).
        for (int64_t i = 0; i < TQ; i += 16) {
          v16 mt = splat(kNegInf);
          for (int64_t j = 0; j < nk; ++j) mt = vmax(mt, load16(st + j * TQ + i));
          const v16 m_old = load16(m + i);
          const v16 m_new = vmax(m_old, mt);
          // A query that has seen no key yet keeps m = -inf; subtract 0 then, so exp2 gives 0, not NaN.
          const v16 m_sub = m_new == kNegInf ? v16{} : m_new;
          const v16 a = exp2v(m_old - m_sub);
          v16 sum{};
          for (int64_t j = 0; j < nk; ++j) {
            const v16 p = exp2v(load16(st + j * TQ + i) - m_sub);
            store16(st + j * TQ + i, p);
            sum += p;
          }
          store16(l + i, load16(l + i) * a + sum);
          store16(m + i, m_new);
          store16(alpha + i, a);
        }
        for (int64_t i = 0; i < nq; ++i) {
          if (alpha[i] == 1.0f) continue;
          for (int64_t d = 0; d < Dp; d += 16) store16(acc + i * Dp + d, load16(acc + i * Dp + d) * alpha[i]);
        }

        // O[i, :] += sum_j P^T[j, i] v_j
        int64_t ldv;
        const float* vop = row_operand(vb, s.ks, nk, D, Dp, vpad, &ldv);
        tile_product(acc, Dp, st, 1, TQ, vop, ldv, nq, nk, Dp, true);
      }

      for (int64_t i = 0; i < nq; ++i) {
        float* o = out + (b * T + q0 + i) * s.qs + h * D;
        float* lrow = lse + (b * H + h) * T + q0 + i;
        if (l[i] > 0.0f) {
          const float inv = 1.0f / l[i];
          for (int64_t d = 0; d < D; ++d) o[d] = acc[i * Dp + d] * inv;
          *lrow = (m[i] + std::log2(l[i])) * kLn2;
        } else {  // no visible key
          for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
          *lrow = kNegInf;
        }
      }
    }
  }
}

// ---- backward --------------------------------------------------------------------------------------
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse, int64_t B, int64_t T, int64_t H,
                        int64_t K, int64_t D, const AttentionMask& mask, float scale) {
  const Shape s = check_and_shape(B, T, H, K, D, mask, scale, "attention_backward");
  if (B == 0 || T == 0) return;
  const int64_t Dp = s.Dp;
  const float c = scale * kLog2e;

  // dq pass: one task per (b, h, query tile), keys as rows of the score tile (S^T) so that the per-query
  // lse and delta are vectors along the tile's columns.
  const int64_t nq_tasks = s.nqt * B * H;
#pragma omp parallel if (s.parallel)
  {
    Scratch scratch(2 * D * TQ + 2 * TK * TQ + TQ * Dp + TK * Dp + 2 * TQ + 64);
    float* qt = scratch.take(D * TQ);     // [D, TQ]  Q tile transposed, times c
    float* dot = scratch.take(D * TQ);    // [D, TQ]  dO tile transposed
    float* st = scratch.take(TK * TQ);    // [TK, TQ] S^T -> P^T -> dS^T
    float* dpt = scratch.take(TK * TQ);   // [TK, TQ] dP^T
    float* acc = scratch.take(TQ * Dp);   // [TQ, Dp] dQ / scale
    float* kpad = scratch.take(TK * Dp);  // [TK, Dp] K tile, when D is not a multiple of 16
    float* lse2 = scratch.take(TQ);       // [TQ]
    float* delta = scratch.take(TQ);      // [TQ]

#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nq_tasks; ++task) {
      const int64_t qtile = s.nqt - 1 - task % s.nqt;  // same order as the forward
      const int64_t b = task / s.nqt / H, h = task / s.nqt % H, g = h / s.group;
      const int64_t q0 = qtile * TQ, nq = std::min(TQ, T - q0);
      const Visibility vis = visibility(mask, b, T);
      const int64_t row0 = (b * T + q0) * s.qs + h * D;

      transpose_rows(qt, TQ, q + row0, s.qs, nq, D, c);
      transpose_rows(dot, TQ, dout + row0, s.qs, nq, D);
      lse_to_log2(lse2, lse + (b * H + h) * T + q0, nq, TQ);
      row_dots(delta, dout + row0, out + row0, s.qs, nq, D, TQ);
      std::fill(acc, acc + TQ * Dp, 0.0f);

      for (int64_t ktile = 0; ktile < s.nkt; ++ktile) {
        const int64_t k0 = ktile * TK, nk = std::min(TK, T - k0);
        const TileMask tm = vis.classify(q0, nq, k0, nk);
        if (tm.skip) continue;
        const float* kb = k + (b * T + k0) * s.ks + g * D;
        const float* vb = v + (b * T + k0) * s.ks + g * D;

        tile_product(st, TQ, kb, s.ks, 1, qt, TQ, nk, D, TQ, false);    // S^T  = c K Q^T
        tile_product(dpt, TQ, vb, s.ks, 1, dot, TQ, nk, D, TQ, false);  // dP^T = V dO^T
        if (tm.partial()) mask_tile(st, TQ, true, vis, tm, q0, nq, k0, nk);
        for (int64_t j = 0; j < nk; ++j)
          for (int64_t i = 0; i < TQ; i += 16) {
            const v16 p = exp2v(load16(st + j * TQ + i) - load16(lse2 + i));
            store16(st + j * TQ + i, p * (load16(dpt + j * TQ + i) - load16(delta + i)));  // dS^T
          }
        // dQ[i, :] += sum_j dS^T[j, i] k_j
        int64_t ldk;
        const float* kop = row_operand(kb, s.ks, nk, D, Dp, kpad, &ldk);
        tile_product(acc, Dp, st, 1, TQ, kop, ldk, nq, nk, Dp, true);
      }
      for (int64_t i = 0; i < nq; ++i) {
        float* o = dq + row0 + i * s.qs;
        for (int64_t d = 0; d < D; ++d) o[d] = acc[i * Dp + d] * scale;
      }
    }
  }

  // dk/dv pass: one task per (b, kv head, key tile), queries as rows of the score tile, looping over the
  // H/K query heads of the group and the query tiles in a fixed order.
  const int64_t nk_tasks = s.nkt * B * K;
#pragma omp parallel if (s.parallel)
  {
    Scratch scratch(2 * D * TK + 2 * TQ * TK + 2 * TK * Dp + 2 * TQ * Dp + 2 * TQ + 64);
    float* kt = scratch.take(D * TK);      // [D, TK]  K tile transposed, times c
    float* vt = scratch.take(D * TK);      // [D, TK]  V tile transposed
    float* sm = scratch.take(TQ * TK);     // [TQ, TK] S -> P
    float* dp = scratch.take(TQ * TK);     // [TQ, TK] dP -> dS
    float* dk_acc = scratch.take(TK * Dp); // [TK, Dp] dK / scale
    float* dv_acc = scratch.take(TK * Dp); // [TK, Dp] dV
    float* qpad = scratch.take(TQ * Dp);   // [TQ, Dp] Q tile, when D is not a multiple of 16
    float* dopad = scratch.take(TQ * Dp);  // [TQ, Dp] dO tile, likewise
    float* lse2 = scratch.take(TQ);        // [TQ]
    float* delta = scratch.take(TQ);       // [TQ]

#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < nk_tasks; ++task) {
      // Consecutive tasks share a kv head (its queries stay in cache); within it the earliest key tiles
      // come first: under a causal mask they are seen by the most queries.
      const int64_t ktile = task % s.nkt;
      const int64_t b = task / s.nkt / K, g = task / s.nkt % K;
      const int64_t k0 = ktile * TK, nk = std::min(TK, T - k0);
      const Visibility vis = visibility(mask, b, T);
      const int64_t krow0 = (b * T + k0) * s.ks + g * D;

      transpose_rows(kt, TK, k + krow0, s.ks, nk, D, c);
      transpose_rows(vt, TK, v + krow0, s.ks, nk, D);
      std::fill(dk_acc, dk_acc + TK * Dp, 0.0f);
      std::fill(dv_acc, dv_acc + TK * Dp, 0.0f);

      for (int64_t h = g * s.group; h < (g + 1) * s.group; ++h) {
        for (int64_t qtile = 0; qtile < s.nqt; ++qtile) {
          const int64_t q0 = qtile * TQ, nq = std::min(TQ, T - q0);
          const TileMask tm = vis.classify(q0, nq, k0, nk);
          if (tm.skip) continue;
          const int64_t row0 = (b * T + q0) * s.qs + h * D;
          const float* qb = q + row0;
          const float* dob = dout + row0;

          lse_to_log2(lse2, lse + (b * H + h) * T + q0, nq, TQ);
          row_dots(delta, dob, out + row0, s.qs, nq, D, TQ);
          tile_product(sm, TK, qb, s.qs, 1, kt, TK, nq, D, TK, false);   // S  = c Q K^T
          tile_product(dp, TK, dob, s.qs, 1, vt, TK, nq, D, TK, false);  // dP = dO V^T
          if (tm.partial()) mask_tile(sm, TK, false, vis, tm, q0, nq, k0, nk);
          for (int64_t i = 0; i < nq; ++i) {
            const float li = lse2[i], di = delta[i];
            for (int64_t j = 0; j < TK; j += 16) {
              const v16 p = exp2v(load16(sm + i * TK + j) - li);
              store16(sm + i * TK + j, p);
              store16(dp + i * TK + j, p * (load16(dp + i * TK + j) - di));
            }
          }
          // dV[j, :] += sum_i P[i, j] dO_i;  dK[j, :] += sum_i dS[i, j] q_i
          int64_t ldo, ldq;
          const float* doop = row_operand(dob, s.qs, nq, D, Dp, dopad, &ldo);
          const float* qop = row_operand(qb, s.qs, nq, D, Dp, qpad, &ldq);
          tile_product(dv_acc, Dp, sm, 1, TK, doop, ldo, nk, nq, Dp, true);
          tile_product(dk_acc, Dp, dp, 1, TK, qop, ldq, nk, nq, Dp, true);
        }
      }
      for (int64_t j = 0; j < nk; ++j) {
        float* dko = dk + krow0 + j * s.ks;
        float* dvo = dv + krow0 + j * s.ks;
        for (int64_t d = 0; d < D; ++d) {
          dko[d] = dk_acc[j * Dp + d] * scale;
          dvo[d] = dv_acc[j * Dp + d];
        }
      }
    }
  }
}

}  // namespace megadlm::cpu
