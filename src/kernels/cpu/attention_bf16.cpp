// Memory-efficient attention with bf16 operands (AVX512-BF16, or AMX tiles: see "AMX" below). Same
// tiles, masks, online softmax and deterministic backward as attention.cpp (read its header comment
// first), with the tile products in bf16. The backward has two schedules with the same bits: a fused
// one (backward_fused), with fewer products, when there are enough (b, kv head) tasks, and two passes
// (dq, then dk/dv) for more parallelism; both make every score tile with keys as rows (S^T). On the
// tiles the position mask cuts (a causal mask's diagonal), every vdpbf16ps product leaves out the
// register blocks the mask hides and the pairs of its sums that carry only zeros (TileCut,
// attention_common.h), as the fp32 kernel does.
// Legend: B batch, T sequence, H query heads, K key/value heads, D head dim; TQ/TK query/key tile rows,
// De = D rounded up to even (whole pairs), Dp = D rounded up to a multiple of 16; a "word" is 32 bits
// holding two bf16, the lower-indexed one in the low half.
//
// The product. vdpbf16ps does c[w] += a[2w] b[2w] + a[2w+1] b[2w+1] over 16 fp32 lanes w, so both
// operands hold PAIRS ALONG THE REDUCTION DIMENSION. In C[r, w] += sum_p A(r, pair p) . B(pair p, w):
//   - the broadcast operand A is read one word (one pair) at a time, so it only needs the two elements
//     of a pair adjacent: any row of q, k, v or dO read in place (the reduction runs along D), or a
//     tile of P / dS stored as words [pairs of keys (or queries)][rows];
//   - the vectorised operand B is stored [kd/2][W] words ("VNNI" order): word (p, w) holds B[2p, w] and
//     B[2p+1, w], so one 64-byte load gives 16 columns' pairs.
// Who is packed, and when (never once per (query tile, key tile) pair):
//   - reductions over D (S^T = K Q^T, dP^T = V dO^T): B is a query tile's Q^T and dO^T, transposed into
//     pairs along D once per query tile walked, as the fp32 kernel transposes them;
//   - reductions over keys or queries (O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q): B is a tile of
//     V, K, dO or Q paired along its rows. Those rows are visited once per tile PAIR, so the whole
//     tensor is packed once per call, tile by tile, before the main loop (a bf16 copy of each, cheap),
//     into a per-thread workspace reused across calls (see Workspace);
//   - P and dS are rounded into words as they are computed (they are per tile pair by nature). With keys
//     as the rows of a score tile (S^T), a row rounded as it stands is already paired along queries
//     (the operand of dV and dK), and two rows interleaved are paired along keys (that of dQ).
// Odd D: pairs would straddle heads, so q, k, v (and dO) are then used through copies padded to De with
// a zero column; padding rows and columns of packed tiles are zero, so odd tile sizes add nothing.
// Rounding: fp32 -> bf16 conversions (vcvtne(2)ps2bf16) round to nearest even; they and vdpbf16ps treat
// denormals as zero, irrelevant at the magnitudes of attention (a P below 2^-126 is 0 anyway).
#include "kernels/cpu/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/attention_common.h"

#if defined(__AVX512BF16__)
// GCC 12 warns that the placeholder of _mm512_undefined_*() in its intrinsics "may be used uninitialized"
// once they are inlined here; that is the intended undefined value, not a bug of ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace megadlm::cpu {

#if defined(__AVX512BF16__)

namespace {

using namespace attn;
using word = uint32_t;  // two bf16: element 2p in the low half, 2p+1 in the high half

inline word load_word(const bf16_t* p) {
  word w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// Rounds lo and hi to bf16 (nearest even; denormals flush to zero) and interleaves them: word w =
// (lo[w], hi[w]).
inline __m512i pack_pairs(v16 lo, v16 hi) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512bh both = _mm512_cvtne2ps_pbh((__m512)hi, (__m512)lo);  // [lo0..lo15, hi0..hi15]
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), (__m512i)both);
}

// Lanes d0 .. min(d0 + 16, n) - 1 of a 16-lane chunk starting at d0.
inline __mmask16 lanes_below(int64_t n, int64_t d0) {
  return n - d0 >= 16 ? __mmask16(0xffff) : n <= d0 ? __mmask16(0) : __mmask16((1u << (n - d0)) - 1);
}

// 16 lanes rounded to bf16 (nearest even, denormals flushed) and stored at p.
inline void store_bf16(bf16_t* p, v16 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh((__m512)x));
}

// 16 bf16 widened to fp32 (exact).
inline __m512 widen16(__m256i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16)); }

// ---- the tile product ------------------------------------------------------------------------------
// C[r, 0:16*NV] = mul * sum_p A(r, p) . Bm[p*ldb + 0:16*NV] (or += without mul when accumulating) for
// r < R, p < kp, where the pair A(r, p) is the word at A + r*ars + p*aks (strides in bf16 elements) and
// Bm holds words. R*NV fp32 accumulators stay in registers for the whole pair loop.
template <int R, int NV>
inline void micro_kernel_bf16(float* C, int64_t ldc, const bf16_t* A, int64_t ars, int64_t aks, const word* Bm,
                              int64_t ldb, int64_t kp, bool accumulate, float mul) {
  __m512 c[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? _mm512_loadu_ps(C + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(Bm + p * ldb + 16 * v);
    const bf16_t* a = A + p * aks;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(load_word(a + r * ars)));
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], ar, b[v]);
    }
  }
  const __m512 m = _mm512_set1_ps(accumulate ? 1.0f : mul);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, _mm512_mul_ps(c[r][v], m));
}

// C[rows, W] = mul * A Bm, or C += A Bm when accumulating; A [rows, 2*kp] as pairs (see micro_kernel_bf16),
// Bm [kp, W] words in VNNI order, W a multiple of 16. On a tile the position mask cuts (`cut.vis` set),
// the parts `kind` names are left out as in the fp32 kernel (for_each_kept_block, over pairs): hidden score blocks
// are written with `fill`, and a sum leaves out the pairs of keys or queries that carry only zeros.
void tile_product_bf16(float* C, int64_t ldc, const bf16_t* A, int64_t ars, int64_t aks, const word* Bm,
                       int64_t ldb, int64_t rows, int64_t kp, int64_t W, bool accumulate, float mul = 1.0f,
                       const TileCut& cut = {}, Cut kind = Cut::None, float fill = 0.0f) {
  for_each_kept_block(C, ldc, rows, W, kp, 2, cut, kind, fill,
                      [&]<int R, int NV>(float* Cb, int64_t r0, int64_t c0, int64_t p0, int64_t np) {
                        micro_kernel_bf16<R, NV>(Cb, ldc, A + r0 * ars + p0 * aks, ars, aks, Bm + p0 * ldb + c0, ldb,
                                                 np, accumulate, mul);
                      });
}

// A tile of words seen as the bf16 pairs of a broadcast operand: row r's pair p at 2*(p*ld + r).
inline const bf16_t* as_pairs(const word* w) { return reinterpret_cast<const bf16_t*>(w); }

// ---- packing ---------------------------------------------------------------------------------------
// Transposes the 16 x 16 words r[0..15] (r[i] = row i) in place, so that r[j] holds column j: pairs
// of rows, then quadruples, interleaved within 128-bit lanes, then the lanes exchanged.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // lane L of t[i]: rows i, i+1 of columns 4L, 4L+1; t[i+1]: 4L+2, 4L+3
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // lane L of r[i + c]: rows i..i+3 of column 4L + c
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  __m512i out[16];
  for (int c = 0; c < 4; ++c) {  // column 4L + c gathers lane L of r[c], r[4 + c], r[8 + c], r[12 + c]
    const __m512i x0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44), x1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
    const __m512i y0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
    out[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    out[8 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    out[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
  for (int k = 0; k < 16; ++k) r[k] = out[k];
}

// B operand paired along D, once per task: dst word (p, i) at dst[p*ld + i] = (x_i[2p], x_i[2p+1]) for the
// n rows x_i of De bf16 (row stride `stride` elements), p < De/2; columns n..ld zeroed. A word transpose,
// in 16 x 16 blocks.
void pack_transposed(word* dst, int64_t ld, const bf16_t* src, int64_t stride, int64_t n, int64_t De) {
  const int64_t np = De / 2;
  for (int64_t i0 = 0; i0 < ld; i0 += 16)
    for (int64_t p0 = 0; p0 < np; p0 += 16) {
      const __mmask16 m = lanes_below(np, p0);
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = i0 + i < n ? _mm512_maskz_loadu_epi32(m, src + (i0 + i) * stride + 2 * p0) : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t k = 0; k < std::min<int64_t>(16, np - p0); ++k) _mm512_storeu_si512(dst + (p0 + k) * ld + i0, r[k]);
    }
}

// B operand paired along rows, one tile of n <= 64 rows of D bf16 (row stride `stride` elements):
// dst word (p, d) at dst[p*Dp + d] = (x_{2p}[d], x_{2p+1}[d]) for p < 32, d < Dp; zero beyond n and D.
void pack_row_pairs(word* dst, int64_t Dp, const bf16_t* src, int64_t stride, int64_t n, int64_t D) {
  for (int64_t p = 0; p < 32; ++p) {
    const bf16_t* lo = 2 * p < n ? src + 2 * p * stride : nullptr;
    const bf16_t* hi = 2 * p + 1 < n ? src + (2 * p + 1) * stride : nullptr;
    for (int64_t d = 0; d < Dp; d += 16) {
      const __mmask16 m = lanes_below(D, d);
      const __m512i a = lo ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo + d)) : _mm512_setzero_si512();
      const __m512i b = hi ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, hi + d)) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + p * Dp + d, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
    }
  }
}

// The bf16 operands' geometry, on top of Shape.
struct Pairs {
  int64_t De;          // D rounded up to even: the row length of the (padded) q, k, v, dO operands
  int64_t qse, kse;    // their row strides in elements: H*De, K*De
  int64_t tile_words;  // one VNNI-packed tile of 64 rows: 32 * Dp words
};

Pairs pairs_of(const Shape& s) {
  static_assert(TQ == 64 && TK == 64, "pack_row_pairs packs tiles of 64 rows");
  Pairs e;
  e.De = (s.D + 1) / 2 * 2;
  e.qse = s.H * e.De;
  e.kse = s.K * e.De;
  e.tile_words = 32 * s.Dp;
  return e;
}

// The once-per-call copies (a few MB at training shapes), per calling thread and reused across calls:
// fresh allocations that large come from mmap, and their first-touch page faults cost as much as the
// packing itself. Buffers only grow; they live as long as the thread.
struct Workspace {
  std::vector<word> tiles[4];   // packed tiles: V, V^T (forward); K, Q, dO, K^T (backward)
  std::vector<bf16_t> rows[4];  // padded q, k, v when D is odd; dO rounded to bf16
  std::vector<float> delta;     // [B, H, T]
};

Workspace& workspace() {
  thread_local Workspace w;
  return w;
}

template <class T>
T* at_least(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// Rows of D bf16 as rows of De: x itself when D is even, else a copy with a zero last column in `hold`.
const bf16_t* even_rows(const bf16_t* x, int64_t rows, int64_t D, int64_t De, bool parallel,
                        std::vector<bf16_t>& hold) {
  if (D == De) return x;
  bf16_t* y = at_least(hold, rows * De);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(y + r * De, x + r * D, D * sizeof(bf16_t));
    y[r * De + D].bits = 0;
  }
  return y;
}

// Every 64-row tile of every (b, head) of x [B, T, heads, width] (width D or De) packed by
// pack_row_pairs, tile ((b*heads + head)*ntiles + tile) at dst + that * tile_words (query and key tiles
// have the same size).
const word* pack_all_row_pairs(std::vector<word>& buf, const bf16_t* x, int64_t heads, int64_t width,
                               const Shape& s, const Pairs& e) {
  const int64_t ntiles = s.nkt, stride = heads * width;
  word* dst = at_least(buf, s.B * heads * ntiles * e.tile_words);
#pragma omp parallel for schedule(static) if (s.parallel)
  for (int64_t t = 0; t < s.B * heads * ntiles; ++t) {
    const int64_t tile = t % ntiles, head = t / ntiles % heads, b = t / ntiles / heads;
    const int64_t r0 = tile * TK;
    pack_row_pairs(dst + t * e.tile_words, s.Dp, x + (b * s.T + r0) * stride + head * width, stride,
                   std::min(TK, s.T - r0), s.D);
  }
  return dst;
}

// ---- AMX -------------------------------------------------------------------------------------------
// Where the CPU has AMX (kernels/cpu/amx.h) and D is a multiple of 32 (whole 16-pair tile rows), every
// tile product runs on the tiles, whose A operand is read as rows of pairs along the reduction. The
// products whose broadcast operand is stored that way take it as it is (S^T = K Q^T and dP^T = V dO^T
// with K, V rows; dV += P^T dO and dK += dS^T Q with the P^T and dS^T rows). The two that sum over keys
// with P^T or dS^T paired along keys (O += P V, dQ += dS K) are computed transposed instead, O^T += V^T P^T
// and dQ^T += K^T dS^T, so that P^T and dS^T are their B operands as they stand and the accumulators are
// [Dp, TQ]; V^T and K^T are packed once per call (transposed_tiles). A tile product sums every pair of
// its tiles, so the TileCut's skipping is not used there: hidden scores are still set to -inf by
// mask_tile, and the zero P and dS terms add nothing. The rows of K and V of a short last tile are
// read from a copy (keys_by_queries). Both backward schedules then run the same products on the same
// operands in the same order, so they still give the same bits (backward_dk_dv_pass).
bool use_amx(const Pairs& e) { return amx::enabled() && e.De % 32 == 0; }

// Each tile of `tiles` row-paired tiles ([32, Dp] words, pack_row_pairs) transposed into [Dp, 64] bf16:
// row d holds element d of the tile's 64 rows in order (zero past its rows), the A operand of a product
// that sums over them.
const bf16_t* transposed_tiles(std::vector<word>& buf, const word* paired, int64_t tiles, const Shape& s,
                               const Pairs& e) {
  word* dst = at_least(buf, tiles * e.tile_words);
#pragma omp parallel for schedule(static) if (s.parallel)
  for (int64_t t = 0; t < tiles; ++t)  // a word transpose: word (p, d) -> (d, p)
    pack_transposed(dst + t * e.tile_words, 32, reinterpret_cast<const bf16_t*>(paired + t * e.tile_words), 2 * s.Dp,
                    32, 2 * s.Dp);
  return reinterpret_cast<const bf16_t*>(dst);
}

inline const uint16_t* bits(const bf16_t* p) { return reinterpret_cast<const uint16_t*>(p); }

// A score tile with keys as rows, C [TK, TQ] = mul * X Y^T: the nk rows of X (a key tile's K or V rows,
// De bf16 at row stride `stride`) against a query tile's Y^T paired along D (yt: [De/2, TQ] words), as
// S^T = c K Q^T and dP^T = V dO^T are made. On the AMX tiles every block is computed, the nk rows of a
// short last tile read from a copy in pad ([TK, De]) so that no row past the tensor is read (its other
// rows keep what pad held: the scores they give are never read); with vdpbf16ps the blocks the cut hides
// are written with `fill` instead.
void keys_by_queries(float* C, const bf16_t* x, int64_t stride, int64_t nk, const word* yt, int64_t De, float mul,
                     bool tiles, bf16_t* pad, const TileCut& cut, float fill) {
  if (!tiles) {
    tile_product_bf16(C, TQ, x, stride, 2, yt, TQ, nk, De / 2, TQ, false, mul, cut, Cut::KeysByQueries, fill);
    return;
  }
  if (nk < TK) {
    for (int64_t j = 0; j < nk; ++j) std::memcpy(pad + j * De, x + j * stride, De * sizeof(bf16_t));
    x = pad;
    stride = De;
  }
  amx::tile_product(C, TQ, bits(x), stride, yt, TQ, TK, De / 2, TQ, false, mul);
}

// dO rounded to bf16 rows [B, T, H, De] (zero column when D is odd) and delta [B, H, T] = dO_i . out_i
// in fp32, one pass over dout. delta takes the ROUNDED dO, the one dP = dO V^T sees: then
// dS = P (dP - delta) = P dO.(v_j - out_i) is the exact gradient for that dO, and its error stays
// relative to dS. With the fp32 dout here, dP - delta would carry an absolute error ~2^-9 |dO| |v|,
// which dominates where the exact dP - delta cancels (peaked softmax).
void round_dout_and_delta(bf16_t* do16, float* delta, const float* dout, const bf16_t* out, const Shape& s,
                          const Pairs& e) {
  const int64_t rows = s.B * s.T * s.H;
#pragma omp parallel for schedule(static) if (s.parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = dout + r * s.D;
    const bf16_t* o = out + r * s.D;
    bf16_t* y = do16 + r * e.De;
    __m512 dot = _mm512_setzero_ps();
    for (int64_t d = 0; d < e.De; d += 16) {
      const __mmask16 m = lanes_below(s.D, d);
      const __m256i a16 = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, a + d));
      _mm256_mask_storeu_epi16(y + d, lanes_below(e.De, d), a16);  // the padding column gets a masked 0
      dot = _mm512_fmadd_ps(widen16(a16), widen16(_mm256_maskz_loadu_epi16(m, o + d)), dot);
    }
    const int64_t h = r % s.H, bt = r / s.H;  // r = (b*T + t)*H + h
    // The lanes added as a tree: a chain of 16 dependent scalar adds per row costs far more.
    delta[(bt / s.T * s.H + h) * s.T + bt % s.T] = _mm512_reduce_add_ps(dot);
  }
}

}  // namespace

// ---- forward ---------------------------------------------------------------------------------------
void attention_forward_bf16(float* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v, int64_t B,
                            int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask, float scale) {
  const Shape s = check_and_shape(B, T, H, K, D, mask, scale, "attention_forward_bf16");
  if (B == 0 || T == 0) return;
  const Pairs e = pairs_of(s);
  const int64_t Dp = s.Dp, De = e.De;
  const float c = scale * kLog2e;  // scores are kept in base 2: exp(x) = exp2(x log2 e)
  Workspace& ws = workspace();
  const bf16_t* qe = even_rows(q, B * T * H, D, De, s.parallel, ws.rows[0]);  // [B, T, H, De]
  const bf16_t* ke = even_rows(k, B * T * K, D, De, s.parallel, ws.rows[1]);  // [B, T, K, De]
  const word* vp = pack_all_row_pairs(ws.tiles[0], v, K, D, s, e);            // V tiles paired along keys
  const bool tiles = use_amx(e);
  const bf16_t* vt = tiles ? transposed_tiles(ws.tiles[1], vp, B * K * s.nkt, s, e) : nullptr;  // V^T tiles
  const int64_t ntasks = s.nqt * B * H;

#pragma omp parallel if (s.parallel)
  {
    const amx::TileScope scope(tiles);
    Scratch scratch(De / 2 * TQ + TK * TQ + TK / 2 * TQ + TQ * Dp + (tiles ? TK * De / 2 : 0) + 4 * TQ + 9 * 16);
    word* qt = scratch.take_words(De / 2 * TQ);  // [De/2, TQ] Q tile paired along D
    float* st = scratch.take(TK * TQ);           // [TK, TQ] S^T
    word* pt = scratch.take_words(TK / 2 * TQ);  // [TK/2, TQ] P^T paired along keys, bf16
    float* acc = scratch.take(TQ * Dp);          // [TQ, Dp] unnormalised output rows; with AMX [Dp, TQ]
    bf16_t* kpad = tiles ? reinterpret_cast<bf16_t*>(scratch.take_words(TK * De / 2)) : nullptr;  // [TK, De]
    float* m = scratch.take(TQ);                 // [TQ] running max (base 2)
    float* l = scratch.take(TQ);                 // [TQ] running sum of exp2(s - m)
    float* alpha = scratch.take(TQ);             // [TQ] rescale factor of this key tile
    float* msub = scratch.take(TQ);              // [TQ] what the exp pass subtracts (base 2)

#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; ++task) {
      const auto [b, h, g, q0, nq, vis] = query_task(s, mask, task);  // order: see query_task

      pack_transposed(qt, TQ, qe + (b * T + q0) * e.qse + h * De, e.qse, nq, De);
      std::fill(acc, acc + TQ * Dp, 0.0f);
      std::fill(m, m + TQ, kNegInf);
      std::fill(l, l + TQ, 0.0f);

      for (int64_t ktile = 0; ktile < s.nkt; ++ktile) {
        const int64_t k0 = ktile * TK, nk = std::min(TK, T - k0);
        const TileMask tm = vis.classify(q0, nq, k0, nk);
        if (tm.skip) continue;
        const bf16_t* kb = ke + (b * T + k0) * e.kse + g * De;  // [nk, De] rows, read in place
        const TileCut cut = tile_cut(vis, tm, q0, k0);

        // S^T[j, i] = c * k_j . q_i, the score in base 2.
        keys_by_queries(st, kb, e.kse, nk, qt, De, c, tiles, kpad, cut, kNegInf);
        if (tm.partial()) mask_tile(st, TQ, true, vis, tm, q0, nq, k0, nk);
        // Online softmax (attention_common.h), P^T rounded into pairs of keys as it is computed; the
        // running sum l takes the fp32 P, as flash-attention's does.
        online_softmax_max(st, nk, m, msub, alpha);
        for (int64_t i = 0; i < TQ; i += 16) {
          const v16 ms = load16(msub + i);
          v16 sum{};
          for (int64_t j = 0; j < nk; j += 2) {
            const v16 p0 = exp2v(load16(st + j * TQ + i) - ms);
            const v16 p1 = j + 1 < nk ? exp2v(load16(st + (j + 1) * TQ + i) - ms) : v16{};
            _mm512_storeu_si512(pt + j / 2 * TQ + i, pack_pairs(p0, p1));
            sum += p0 + p1;
          }
          store16(l + i, load16(l + i) * load16(alpha + i) + sum);
        }
        // O[i, :] += sum_j bf16(P^T[j, i]) v_j; with AMX O^T[:, i] += V^T P^T[:, i].
        const int64_t vtile = ((b * K + g) * s.nkt + ktile) * e.tile_words;
        if (tiles) {
          rescale_columns(acc, Dp, alpha);
          amx::tile_product(acc, TQ, bits(vt) + 2 * vtile, TK, pt, TQ, Dp, TK / 2, TQ, true, 1.0f);
        } else {
          rescale_rows(acc, nq, Dp, alpha);
          tile_product_bf16(acc, Dp, as_pairs(pt), 2, 2 * TQ, vp + vtile, Dp, nq, (nk + 1) / 2, Dp, true, 1.0f, cut,
                            Cut::SumOverKeys);
        }
      }
      finish_query_rows(out + (b * T + q0) * s.qs + h * D, s.qs, lse + (b * H + h) * T + q0, acc, tiles ? 1 : Dp,
                        tiles ? TQ : 1, m, l, nq, D);
    }
  }
}

// ---- backward --------------------------------------------------------------------------------------
namespace {

// The fused schedule is used when there are at least this many (b, kv head) tasks per thread.
constexpr int64_t kFusedTasksPerThread = 4;

// What every backward schedule reads: the call's arguments and the once-per-call copies.
struct BackwardOperands {
  Shape s;
  Pairs e;
  AttentionMask mask;
  float scale, c;                       // c = scale * log2(e): scores in base 2
  const bf16_t *qe, *ke, *ve, *do16;    // [B, T, H|K, De] rows (bf16)
  const float *lse, *delta_all;         // [B, H, T]
  const word *kp, *qp, *dop;            // K, Q, dO tiles paired along their rows
  bool tiles;                           // AMX tile products (see use_amx)
  const bf16_t* kt;                     // with AMX: K^T tiles [Dp, TK] (transposed_tiles), else null
  float *dq, *dk, *dv;                  // outputs, written
};

// The score tile of one (query tile, key tile) pair with keys as rows, and what the products after it
// need: S^T = c K Q^T and dP^T = V dO^T, masked; P^T = exp2(S^T - lse2) and dS^T = P^T (dP^T - delta)
// (fp32, a lane per query), rounded to bf16 as
//   - ds_keys [TK/2, TQ] words: dS^T paired along keys (rows j, j+1), the broadcast operand of dQ;
//   - p_rows, ds_rows [TK, TQ] bf16 (optional): P^T and dS^T rows as they are, i.e. paired along
//     queries, the broadcast operands of dV and dK.
// Query lanes past nq have zero Q^T / dO^T columns and lse2 = +inf, so their P and dS are 0; an odd last
// key pairs with 0 in ds_keys.
struct ScoreTiles {
  float *st, *dpt;                      // [TK, TQ] scratch
  word* ds_keys;                        // [TK/2, TQ]
  bf16_t *p_rows, *ds_rows;             // [TK, TQ] each, or null
  bf16_t* pad;                          // [TK, De] with AMX (keys_by_queries), else null
};

void score_tiles(const ScoreTiles& t, const BackwardOperands& o, const Visibility& vis, const TileMask& tm,
                 const TileCut& cut, const word* qt, const word* dot, const float* lse2, const float* delta,
                 int64_t q0, int64_t nq, int64_t krow0, int64_t k0, int64_t nk) {
  const int64_t De = o.e.De;
  keys_by_queries(t.st, o.ke + krow0, o.e.kse, nk, qt, De, o.c, o.tiles, t.pad, cut, kNegInf);  // S^T = c K Q^T
  keys_by_queries(t.dpt, o.ve + krow0, o.e.kse, nk, dot, De, 1.0f, o.tiles, t.pad, cut, 0.0f);   // dP^T = V dO^T
  if (tm.partial()) mask_tile(t.st, TQ, true, vis, tm, q0, nq, k0, nk);
  for (int64_t j = 0; j < nk; j += 2) {
    const bool has_hi = j + 1 < nk;
    for (int64_t i = 0; i < TQ; i += 16) {
      const v16 l2 = load16(lse2 + i), di = load16(delta + i);
      const v16 p0 = exp2v(load16(t.st + j * TQ + i) - l2);
      const v16 p1 = has_hi ? exp2v(load16(t.st + (j + 1) * TQ + i) - l2) : v16{};
      const v16 ds0 = p0 * (load16(t.dpt + j * TQ + i) - di);
      const v16 ds1 = has_hi ? p1 * (load16(t.dpt + (j + 1) * TQ + i) - di) : v16{};
      _mm512_storeu_si512(t.ds_keys + j / 2 * TQ + i, pack_pairs(ds0, ds1));
      if (t.p_rows == nullptr) continue;
      store_bf16(t.p_rows + j * TQ + i, p0);
      store_bf16(t.ds_rows + j * TQ + i, ds0);
      if (!has_hi) continue;
      store_bf16(t.p_rows + (j + 1) * TQ + i, p1);
      store_bf16(t.ds_rows + (j + 1) * TQ + i, ds1);
    }
  }
}

// dQ[i, :] += sum_j dS^T[j, i] k_j over the key tile ktile of kv head g: acc [TQ, Dp] (dQ / scale); with
// AMX dQ^T[:, i] += K^T dS^T[:, i] into acc [Dp, TQ].
void add_dq(float* acc, const ScoreTiles& t, const BackwardOperands& o, const TileCut& cut, int64_t b, int64_t g,
            int64_t ktile, int64_t nq, int64_t nk) {
  const Shape& s = o.s;
  const int64_t tile = ((b * s.K + g) * s.nkt + ktile) * o.e.tile_words;
  if (o.tiles) {
    amx::tile_product(acc, TQ, bits(o.kt) + 2 * tile, TK, t.ds_keys, TQ, s.Dp, TK / 2, TQ, true, 1.0f);
    return;
  }
  tile_product_bf16(acc, s.Dp, as_pairs(t.ds_keys), 2, 2 * TQ, o.kp + tile, s.Dp, nq, (nk + 1) / 2, s.Dp, true, 1.0f,
                    cut, Cut::SumOverKeys);
}

// dV[j, :] += sum_i P^T[j, i] dO_i and dK[j, :] += sum_i dS^T[j, i] q_i for the key tile's rows of the
// accumulators dk_acc, dv_acc ([TK, Dp] from the tile's first row: dK / scale, dV), from the P^T and dS^T
// rows of one (query tile, key tile) pair; qtile_words locates the query tile's packed dO and Q.
void add_dk_dv(float* dk_acc, float* dv_acc, const ScoreTiles& t, const BackwardOperands& o, const TileCut& cut,
               int64_t qtile_words, int64_t nq, int64_t nk) {
  const int64_t Dp = o.s.Dp;
  if (o.tiles) {  // every row and pair of the tiles: P and dS are 0 past nq, the rows past nk are not stored
    amx::tile_product(dv_acc, Dp, bits(t.p_rows), TQ, o.dop + qtile_words, Dp, TK, TQ / 2, Dp, true, 1.0f);
    amx::tile_product(dk_acc, Dp, bits(t.ds_rows), TQ, o.qp + qtile_words, Dp, TK, TQ / 2, Dp, true, 1.0f);
    return;
  }
  tile_product_bf16(dv_acc, Dp, t.p_rows, TQ, 2, o.dop + qtile_words, Dp, nk, (nq + 1) / 2, Dp, true, 1.0f, cut,
                    Cut::SumOverQueries);
  tile_product_bf16(dk_acc, Dp, t.ds_rows, TQ, 2, o.qp + qtile_words, Dp, nk, (nq + 1) / 2, Dp, true, 1.0f, cut,
                    Cut::SumOverQueries);
}

// A query tile's setup in the passes that walk key tiles for it: Q^T and dO^T paired along D, lse in
// base 2 and delta, both padded (+inf, 0) to TQ lanes.
void load_query_tile(word* qt, word* dot, float* lse2, float* delta, const BackwardOperands& o, int64_t b,
                     int64_t h, int64_t q0, int64_t nq) {
  const Shape& s = o.s;
  const int64_t row0 = (b * s.T + q0) * o.e.qse + h * o.e.De;
  pack_transposed(qt, TQ, o.qe + row0, o.e.qse, nq, o.e.De);
  pack_transposed(dot, TQ, o.do16 + row0, o.e.qse, nq, o.e.De);
  lse_to_log2(lse2, o.lse + (b * s.H + h) * s.T + q0, nq, TQ);
  const float* d = o.delta_all + (b * s.H + h) * s.T + q0;
  std::copy(d, d + nq, delta);
  std::fill(delta + nq, delta + TQ, 0.0f);
}

// dq rows [nq, D] of head h = scale * acc (acc [TQ, Dp], with AMX [Dp, TQ]).
void store_dq(const BackwardOperands& o, const float* acc, int64_t b, int64_t h, int64_t q0, int64_t nq) {
  const Shape& s = o.s;
  const int64_t acc_i = o.tiles ? 1 : s.Dp, acc_d = o.tiles ? TQ : 1;
  for (int64_t i = 0; i < nq; ++i) {
    float* out = o.dq + (b * s.T + q0 + i) * s.qs + h * s.D;
    for (int64_t d = 0; d < s.D; ++d) out[d] = acc[i * acc_i + d * acc_d] * o.scale;
  }
}

// dk, dv rows [nk, D] of kv head g: dk = scale * dk_acc, dv = dv_acc.
void store_dk_dv(const BackwardOperands& o, const float* dk_acc, const float* dv_acc, int64_t b, int64_t g,
                 int64_t k0, int64_t nk) {
  const Shape& s = o.s;
  for (int64_t j = 0; j < nk; ++j) {
    float* dko = o.dk + (b * s.T + k0 + j) * s.ks + g * s.D;
    float* dvo = o.dv + (b * s.T + k0 + j) * s.ks + g * s.D;
    for (int64_t d = 0; d < s.D; ++d) {
      dko[d] = dk_acc[j * s.Dp + d] * o.scale;
      dvo[d] = dv_acc[j * s.Dp + d];
    }
  }
}

// A thread's tiles for walking one query tile over the key tiles: its Q^T and dO^T, lse2 and delta
// (load_query_tile), the score tiles and the dQ accumulator.
struct QueryTileScratch {
  word *qt, *dot;                  // [De/2, TQ] each
  float *lse2, *delta, *dq_acc;    // [TQ], [TQ], [TQ, Dp] (dQ / scale; with AMX [Dp, TQ])
  ScoreTiles t;

  // Floats to reserve in a Scratch: with_rows adds the score rows the fused schedule needs.
  static int64_t floats(const BackwardOperands& o, bool with_rows) {
    return o.e.De * TQ + 2 * TK * TQ + TK / 2 * TQ + (with_rows ? TK * TQ : 0) + TQ * o.s.Dp + 2 * TQ +
           (o.tiles ? TK * o.e.De / 2 : 0) + 11 * 16;
  }
  QueryTileScratch(Scratch& scratch, const BackwardOperands& o, bool with_rows) : t{} {
    qt = scratch.take_words(o.e.De / 2 * TQ);
    dot = scratch.take_words(o.e.De / 2 * TQ);
    t.st = scratch.take(TK * TQ);
    t.dpt = scratch.take(TK * TQ);
    t.ds_keys = scratch.take_words(TK / 2 * TQ);
    if (with_rows) {
      t.p_rows = reinterpret_cast<bf16_t*>(scratch.take_words(TK * TQ / 2));
      t.ds_rows = reinterpret_cast<bf16_t*>(scratch.take_words(TK * TQ / 2));
    }
    dq_acc = scratch.take(TQ * o.s.Dp);
    lse2 = scratch.take(TQ);
    delta = scratch.take(TQ);
    if (o.tiles) t.pad = reinterpret_cast<bf16_t*>(scratch.take_words(TK * o.e.De / 2));
  }
};

// The query tile [q0, q0 + nq) of head h (kv head g) against every key tile it sees, in order: the score
// tiles and dQ (written to dq at the end), and after each key tile more(ktile, k0, nk, cut), which may
// use the tiles in w.t (cut: the pair's TileCut).
template <class More>
void walk_query_tile(QueryTileScratch& w, const BackwardOperands& o, const Visibility& vis, int64_t b, int64_t h,
                     int64_t g, int64_t q0, int64_t nq, More&& more) {
  const Shape& s = o.s;
  load_query_tile(w.qt, w.dot, w.lse2, w.delta, o, b, h, q0, nq);
  std::fill(w.dq_acc, w.dq_acc + TQ * s.Dp, 0.0f);
  for (int64_t ktile = 0; ktile < s.nkt; ++ktile) {
    const int64_t k0 = ktile * TK, nk = std::min(TK, s.T - k0);
    const TileMask tm = vis.classify(q0, nq, k0, nk);
    if (tm.skip) continue;
    const TileCut cut = tile_cut(vis, tm, q0, k0);
    score_tiles(w.t, o, vis, tm, cut, w.qt, w.dot, w.lse2, w.delta, q0, nq, (b * s.T + k0) * o.e.kse + g * o.e.De,
                k0, nk);
    add_dq(w.dq_acc, w.t, o, cut, b, g, ktile, nq, nk);
    more(ktile, k0, nk, cut);
  }
  store_dq(o, w.dq_acc, b, h, q0, nq);
}

// The fused schedule: one task per (b, kv head g). For each query head h of the group and each query
// tile, in that order, every visible key tile: S^T, dP^T, P^T and dS^T once, then dQ of this query tile,
// dV and dK of that key tile (accumulated over the whole task in [nkt*TK, Dp] buffers). Five tile
// products per pair and one exp2 pass, against seven and two in the two passes below. Each output sums
// the same bf16 operands in the same order as there (dQ over key tiles; dK and dV over (h, query tile)),
// so the results are bitwise those of the two passes; only the parallelism is coarser (B*K tasks).
void backward_fused(const BackwardOperands& o) {
  const Shape& s = o.s;
  const int64_t Dp = s.Dp, Tk = s.nkt * TK;
#pragma omp parallel if (s.parallel)
  {
    const amx::TileScope scope(o.tiles);
    Scratch scratch(QueryTileScratch::floats(o, true) + 2 * Tk * Dp + 2 * 16);
    QueryTileScratch w(scratch, o, true);
    float* dk_acc = scratch.take(Tk * Dp);  // [nkt*TK, Dp] dK / scale of the task's kv head
    float* dv_acc = scratch.take(Tk * Dp);  // [nkt*TK, Dp] dV

#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < s.B * s.K; ++task) {
      const int64_t b = task / s.K, g = task % s.K;
      const Visibility vis = visibility(o.mask, b, s.T);
      std::fill(dk_acc, dk_acc + Tk * Dp, 0.0f);
      std::fill(dv_acc, dv_acc + Tk * Dp, 0.0f);
      for (int64_t h = g * s.group; h < (g + 1) * s.group; ++h) {
        for (int64_t qtile = 0; qtile < s.nqt; ++qtile) {
          const int64_t q0 = qtile * TQ, nq = std::min(TQ, s.T - q0);
          const int64_t qtile_words = ((b * s.H + h) * s.nqt + qtile) * o.e.tile_words;
          walk_query_tile(w, o, vis, b, h, g, q0, nq, [&](int64_t, int64_t k0, int64_t nk, const TileCut& cut) {
            add_dk_dv(dk_acc + k0 * Dp, dv_acc + k0 * Dp, w.t, o, cut, qtile_words, nq, nk);
          });
        }
      }
      for (int64_t ktile = 0; ktile < s.nkt; ++ktile) {
        const int64_t k0 = ktile * TK;
        store_dk_dv(o, dk_acc + k0 * Dp, dv_acc + k0 * Dp, b, g, k0, std::min(TK, s.T - k0));
      }
    }
  }
}

// The two-pass schedule, pass one: one task per (b, h, query tile), keys as rows of the score tile
// (S^T); dq only.
void backward_dq_pass(const BackwardOperands& o) {
  const Shape& s = o.s;
  const int64_t ntasks = s.nqt * s.B * s.H;
#pragma omp parallel if (s.parallel)
  {
    const amx::TileScope scope(o.tiles);
    Scratch scratch(QueryTileScratch::floats(o, false));
    QueryTileScratch w(scratch, o, false);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; ++task) {
      const auto [b, h, g, q0, nq, vis] = query_task(s, o.mask, task);  // order: see query_task
      walk_query_tile(w, o, vis, b, h, g, q0, nq, [](int64_t, int64_t, int64_t, const TileCut&) {});
    }
  }
}

// The two-pass schedule, pass two: one task per (b, kv head, key tile), walking the query heads of the
// group and their query tiles in the fused schedule's order; each pair's score tiles are made with keys
// as rows as there (load_query_tile, score_tiles) and its dV and dK products are the fused schedule's
// (add_dk_dv), so the results are bitwise backward_fused's, with B*K*nkt tasks. (Scores with queries as
// rows would pair P and dS along queries, which AMX's A operand cannot take. Both product paths share
// this pass: with vdpbf16ps it runs about as fast as a queries-as-rows pass that packs K^T and V^T once
// per task, although it packs Q^T and dO^T for every pair; docs/bench/decisions.md.)
void backward_dk_dv_pass(const BackwardOperands& o) {
  const Shape& s = o.s;
  const int64_t Dp = s.Dp, ntasks = s.nkt * s.B * s.K;
#pragma omp parallel if (s.parallel)
  {
    const amx::TileScope scope(o.tiles);
    Scratch scratch(QueryTileScratch::floats(o, true) + 2 * TK * Dp + 2 * 16);
    QueryTileScratch w(scratch, o, true);
    float* dk_acc = scratch.take(TK * Dp);  // [TK, Dp] dK / scale
    float* dv_acc = scratch.take(TK * Dp);  // [TK, Dp] dV

#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; ++task) {
      const auto [b, g, k0, nk, vis] = key_task(s, o.mask, task);  // order: see key_task
      std::fill(dk_acc, dk_acc + TK * Dp, 0.0f);
      std::fill(dv_acc, dv_acc + TK * Dp, 0.0f);
      for (int64_t h = g * s.group; h < (g + 1) * s.group; ++h) {
        for (int64_t qtile = 0; qtile < s.nqt; ++qtile) {
          const int64_t q0 = qtile * TQ, nq = std::min(TQ, s.T - q0);
          const TileMask tm = vis.classify(q0, nq, k0, nk);
          if (tm.skip) continue;
          const TileCut cut = tile_cut(vis, tm, q0, k0);
          load_query_tile(w.qt, w.dot, w.lse2, w.delta, o, b, h, q0, nq);
          score_tiles(w.t, o, vis, tm, cut, w.qt, w.dot, w.lse2, w.delta, q0, nq,
                      (b * s.T + k0) * o.e.kse + g * o.e.De, k0, nk);
          add_dk_dv(dk_acc, dv_acc, w.t, o, cut, ((b * s.H + h) * s.nqt + qtile) * o.e.tile_words, nq, nk);
        }
      }
      store_dk_dv(o, dk_acc, dv_acc, b, g, k0, nk);
    }
  }
}

}  // namespace

bool attention_bf16_native() { return true; }

void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const bf16_t* q, const bf16_t* k,
                             const bf16_t* v, const bf16_t* out, const float* lse, int64_t B, int64_t T, int64_t H,
                             int64_t K, int64_t D, const AttentionMask& mask, float scale,
                             AttentionBackwardSchedule schedule) {
  const Shape s = check_and_shape(B, T, H, K, D, mask, scale, "attention_backward_bf16");
  if (B == 0 || T == 0) return;
  BackwardOperands o;
  o.s = s;
  o.e = pairs_of(s);
  o.mask = mask;
  o.scale = scale;
  o.c = scale * kLog2e;

  // Once per call: even-length rows of q, k, v, dO (bf16), delta, and the tiles paired along rows.
  const int64_t De = o.e.De;
  Workspace& ws = workspace();
  o.qe = even_rows(q, B * T * H, D, De, s.parallel, ws.rows[0]);  // [B, T, H, De]
  o.ke = even_rows(k, B * T * K, D, De, s.parallel, ws.rows[1]);  // [B, T, K, De]
  o.ve = even_rows(v, B * T * K, D, De, s.parallel, ws.rows[2]);  // [B, T, K, De]
  bf16_t* do16 = at_least(ws.rows[3], B * T * H * De);            // [B, T, H, De]
  float* delta_all = at_least(ws.delta, B * H * T);               // [B, H, T]
  round_dout_and_delta(do16, delta_all, dout, out, s, o.e);
  o.do16 = do16;
  o.delta_all = delta_all;
  o.lse = lse;
  o.kp = pack_all_row_pairs(ws.tiles[0], o.ke, K, De, s, o.e);   // K tiles paired along keys
  o.qp = pack_all_row_pairs(ws.tiles[1], o.qe, H, De, s, o.e);   // Q tiles paired along queries
  o.dop = pack_all_row_pairs(ws.tiles[2], do16, H, De, s, o.e);  // dO tiles, likewise
  o.tiles = use_amx(o.e);
  o.kt = o.tiles ? transposed_tiles(ws.tiles[3], o.kp, B * K * s.nkt, s, o.e) : nullptr;  // K^T tiles
  o.dq = dq, o.dk = dk, o.dv = dv;

  // The fused schedule's B*K tasks keep a team busy only when they are several per thread.
  const bool fused = schedule == AttentionBackwardSchedule::Fused ||
                     (schedule == AttentionBackwardSchedule::Auto &&
                      (!s.parallel || B * K >= kFusedTasksPerThread * omp_get_max_threads()));
  if (fused) {
    backward_fused(o);
  } else {
    backward_dq_pass(o);
    backward_dk_dv_pass(o);
  }
}

#else  // no AVX512-BF16: widen to fp32 and run the fp32 kernels

namespace {
std::vector<float> widen(const bf16_t* x, int64_t n) {
  std::vector<float> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i].bits);
  return y;
}
}  // namespace

bool attention_bf16_native() { return false; }

void attention_forward_bf16(float* out, float* lse, const bf16_t* q, const bf16_t* k, const bf16_t* v, int64_t B,
                            int64_t T, int64_t H, int64_t K, int64_t D, const AttentionMask& mask, float scale) {
  const std::vector<float> qf = widen(q, B * T * H * D), kf = widen(k, B * T * K * D), vf = widen(v, B * T * K * D);
  attention_forward(out, lse, qf.data(), kf.data(), vf.data(), B, T, H, K, D, mask, scale);
}

void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const bf16_t* q, const bf16_t* k,
                             const bf16_t* v, const bf16_t* out, const float* lse, int64_t B, int64_t T, int64_t H,
                             int64_t K, int64_t D, const AttentionMask& mask, float scale,
                             AttentionBackwardSchedule /*schedule: the fp32 kernel has one*/) {
  const std::vector<float> qf = widen(q, B * T * H * D), kf = widen(k, B * T * K * D), vf = widen(v, B * T * K * D);
  const std::vector<float> of = widen(out, B * T * H * D);
  attention_backward(dq, dk, dv, dout, qf.data(), kf.data(), vf.data(), of.data(), lse, B, T, H, K, D, mask, scale);
}

#endif

}  // namespace megadlm::cpu
