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
// On the tiles the position mask cuts (a causal mask's diagonal), every product leaves out the
// register blocks the mask hides and the zero terms of its sums (TileCut, attention_common.h).
//
// All tile products go through one register-blocked micro-kernel written with GCC vector extensions
// (16 floats per vector: one AVX-512 register under -march=native, a pair of AVX2 registers on CPUs
// without AVX-512; vec16.h).
// Every product is arranged so that its vectorised operand is either a row of the inputs (read in place)
// or a tile transposed once per task (Q^T per query tile, K^T and V^T per key tile), never once per
// (query tile, key tile) pair.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention_common.h"

namespace megadlm::cpu {

namespace {

using namespace attn;

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

// C[rows, W] (+)= A[rows, kd] @ Bm[kd, W], W a multiple of 16; A element (r, k) at A[r*ars + k*aks].
// Register blocks as for_each_register_block walks them (a 64-wide panel of Bm stays in L1). On a cut
// tile (`cut.vis` set) the parts `kind` names are left out (for_each_kept_block), hidden score blocks
// written with `fill`.
void tile_product(float* C, int64_t ldc, const float* A, int64_t ars, int64_t aks, const float* Bm, int64_t ldb,
                  int64_t rows, int64_t kd, int64_t W, bool accumulate, const TileCut& cut = {},
                  Cut kind = Cut::None, float fill = 0.0f) {
  for_each_kept_block(C, ldc, rows, W, kd, 1, cut, kind, fill,
                      [&]<int R, int NV>(float* Cb, int64_t r0, int64_t c0, int64_t k0, int64_t nk) {
                        micro_kernel<R, NV>(Cb, ldc, A + r0 * ars + k0 * aks, ars, aks, Bm + k0 * ldb + c0, ldb, nk,
                                            accumulate);
                      });
}

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
      const auto [b, h, g, q0, nq, vis] = query_task(s, mask, task);  // order: see query_task
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

        const TileCut cut = tile_cut(vis, tm, q0, k0);

        // S^T[j, i] = c * k_j . q_i, the score in base 2.
        tile_product(st, TQ, kb, s.ks, 1, qt, TQ, nk, D, TQ, false, cut, Cut::KeysByQueries, kNegInf);
        if (tm.partial()) mask_tile(st, TQ, true, vis, tm, q0, nq, k0, nk);

        online_softmax_step(st, nk, m, l, alpha, acc, nq, Dp);

        // O[i, :] += sum_j P^T[j, i] v_j
        int64_t ldv;
        const float* vop = row_operand(vb, s.ks, nk, D, Dp, vpad, &ldv);
        tile_product(acc, Dp, st, 1, TQ, vop, ldv, nq, nk, Dp, true, cut, Cut::SumOverKeys);
      }

      finish_query_rows(out + (b * T + q0) * s.qs + h * D, s.qs, lse + (b * H + h) * T + q0, acc, Dp, 1, m, l, nq, D);
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
      const auto [b, h, g, q0, nq, vis] = query_task(s, mask, task);  // order: see query_task
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

        const TileCut cut = tile_cut(vis, tm, q0, k0);

        tile_product(st, TQ, kb, s.ks, 1, qt, TQ, nk, D, TQ, false, cut, Cut::KeysByQueries, kNegInf);  // S^T = c K Q^T
        tile_product(dpt, TQ, vb, s.ks, 1, dot, TQ, nk, D, TQ, false, cut, Cut::KeysByQueries);  // dP^T = V dO^T
        if (tm.partial()) mask_tile(st, TQ, true, vis, tm, q0, nq, k0, nk);
        for (int64_t j = 0; j < nk; ++j)
          for (int64_t i = 0; i < TQ; i += 16) {
            const v16 p = exp2v(load16(st + j * TQ + i) - load16(lse2 + i));
            store16(st + j * TQ + i, p * (load16(dpt + j * TQ + i) - load16(delta + i)));  // dS^T
          }
        // dQ[i, :] += sum_j dS^T[j, i] k_j
        int64_t ldk;
        const float* kop = row_operand(kb, s.ks, nk, D, Dp, kpad, &ldk);
        tile_product(acc, Dp, st, 1, TQ, kop, ldk, nq, nk, Dp, true, cut, Cut::SumOverKeys);
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
      const auto [b, g, k0, nk, vis] = key_task(s, mask, task);  // order: see key_task
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
          const TileCut cut = tile_cut(vis, tm, q0, k0);
          tile_product(sm, TK, qb, s.qs, 1, kt, TK, nq, D, TK, false, cut, Cut::QueriesByKeys, kNegInf);  // S = c Q K^T
          tile_product(dp, TK, dob, s.qs, 1, vt, TK, nq, D, TK, false, cut, Cut::QueriesByKeys);  // dP = dO V^T
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
          tile_product(dv_acc, Dp, sm, 1, TK, doop, ldo, nk, nq, Dp, true, cut, Cut::SumOverQueries);
          tile_product(dk_acc, Dp, dp, 1, TK, qop, ldq, nk, nq, Dp, true, cut, Cut::SumOverQueries);
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
