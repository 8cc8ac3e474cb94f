// Grouped products over experts: one parallel pass over a flattened list of output tiles (grouped_gemm.h).
#include "kernels/cpu/grouped_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "core/error.h"
#include "kernels/cpu/vec16.h"
#include "kernels/grouped_gemm_args.h"

namespace megadlm::cpu {

namespace {

// A work item: rows [m0, m0 + m) and columns [n0, n0 + n) of group g's output over the terms
// [k0, k0 + depth) of its reduction (its cost is m * n * depth). A piece of a reduction cut into several
// (the weight gradient's rows) writes its partial sum into `partial` (an m x n block of the scratch,
// row stride n) instead of the output; null for an item that writes or accumulates into the output.
struct Tile {
  int64_t g, m0, m, n0, n, k0, depth;
  float* partial = nullptr;
  double cost() const { return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(depth); }
};

// One group's output [rows, cols] with a reduction of `depth` terms; split_depth: the reduction may be
// cut into pieces whose partial sums are added afterwards (the weight gradient, whose output is fixed
// by the weight's shape however many rows the expert has).
struct GroupOutput {
  int64_t g, rows, cols, depth;
  bool split_depth;
  double cost() const { return static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(depth); }
};

// Work items are cut no smaller than this many rows or columns, and a reduction into no more pieces
// than it has multiples of this many terms (so pieces of at least half of it): below that oneDNN's
// per-call packing and setup are no longer small beside the tile's multiply-adds (and a reduction
// piece's partial sum no longer small beside its products).
constexpr int64_t kMinSide = 64;
// Pieces are cut to at most 1 / (kPiecesPerThread * threads) of the whole work, so that the dynamic
// shares (costliest first) can even out the threads' loads.
constexpr int64_t kPiecesPerThread = 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How one output is cut: pieces along its rows, its columns and its reduction.
struct Cut {
  int64_t rows = 1, cols = 1, depth = 1;
};

// As coarse as the balance allows: an output whose cost fits within the share above stays whole (one
// sgemm, as efficient as the whole product); a larger one is cut along its rows first, along its columns
// only when rows alone cannot make the pieces small enough, and along its reduction (where allowed) only
// when the output itself is too small to cut further. oneDNN runs a whole product measurably faster than
// the same product cut into small tiles, so cutting only as far as the threads need keeps the per-thread
// rate of the loop.
Cut cut_of(const GroupOutput& o, double cap, int threads) {
  Cut c;
  if (threads <= 1 || o.rows == 0 || o.cols == 0) return c;
  const int64_t pieces = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.cost() / cap)));
  c.rows = std::min(pieces, ceil_div(o.rows, kMinSide));
  c.cols = std::min(ceil_div(pieces, c.rows), ceil_div(o.cols, kMinSide));
  if (o.split_depth) c.depth = std::clamp<int64_t>(ceil_div(pieces, c.rows * c.cols), 1, ceil_div(o.depth, kMinSide));
  return c;
}

double cap_of(const std::vector<GroupOutput>& outputs, int threads) {
  double total = 0;
  for (const GroupOutput& o : outputs) total += o.cost();
  return total / static_cast<double>(kPiecesPerThread * std::max(threads, 1));
}

// The work items of every output, and the scratch their partial sums need (items of a cut reduction
// other than its first write into it; the first accumulates straight into the output). The cut, hence
// the summation order of every output element, depends only on the shapes and the thread count.
struct Plan {
  std::vector<Tile> tiles;
  std::vector<float> scratch;
};

Plan plan(const std::vector<GroupOutput>& outputs, int threads) {
  const double cap = cap_of(outputs, threads);
  Plan p;
  std::vector<int64_t> partial_at;  // scratch offset of each tile's partial, -1 where none
  int64_t scratch = 0;
  for (const GroupOutput& o : outputs) {
    if (o.rows == 0 || o.cols == 0 || o.depth == 0) continue;
    const Cut c = cut_of(o, cap, threads);
    const int64_t tm = ceil_div(o.rows, c.rows), tn = ceil_div(o.cols, c.cols);
    for (int64_t m0 = 0; m0 < o.rows; m0 += tm)
      for (int64_t n0 = 0; n0 < o.cols; n0 += tn)
        for (int64_t d = 0; d < c.depth; ++d) {
          // reduction pieces of floor or ceil(depth / c.depth) terms: at least 32 where cut (cut_of)
          const int64_t k0 = o.depth * d / c.depth, k1 = o.depth * (d + 1) / c.depth;
          const Tile t{o.g, m0, std::min(tm, o.rows - m0), n0, std::min(tn, o.cols - n0), k0, k1 - k0};
          p.tiles.push_back(t);
          partial_at.push_back(k0 == 0 ? -1 : scratch);
          if (k0 > 0) scratch += t.m * t.n;
        }
  }
  p.scratch.resize(static_cast<size_t>(scratch));
  for (size_t i = 0; i < p.tiles.size(); ++i)
    if (partial_at[i] >= 0) p.tiles[i].partial = p.scratch.data() + partial_at[i];
  return p;
}

std::vector<Tile> tiles_of(const std::vector<GroupOutput>& outputs, int threads) {
  return plan(outputs, threads).tiles;
}

// A weight gradient over fewer rows than this goes through few_rows_weight_grad instead of oneDNN,
// whose packing and setup cost more than the few multiply-adds per output element there.
constexpr int64_t kFewRows = 8;

using vec::v8;
inline v8 load8(const float* p) { return *reinterpret_cast<const vec::v8u*>(p); }
inline void store8(float* p, v8 x) { *reinterpret_cast<vec::v8u*>(p) = x; }

// C [m, n] (row stride ldc) += A^T B over r rows, A [r, m] (row stride lda), B [r, n] (row stride
// ldb): each row of C read and written once, its columns held in registers 32 at a time while the r
// rank-1 terms are added in row order.
void few_rows_weight_grad(int64_t r, int64_t m, int64_t n, const float* A, int64_t lda, const float* B, int64_t ldb,
                          float* C, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* c = C + i * ldc;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      v8 c0 = load8(c + j), c1 = load8(c + j + 8), c2 = load8(c + j + 16), c3 = load8(c + j + 24);
      for (int64_t p = 0; p < r; ++p) {
        const float a = A[p * lda + i];
        const v8 av = {a, a, a, a, a, a, a, a};
        const float* b = B + p * ldb + j;
        c0 += av * load8(b), c1 += av * load8(b + 8), c2 += av * load8(b + 16), c3 += av * load8(b + 24);
      }
      store8(c + j, c0), store8(c + j + 8, c1), store8(c + j + 16, c2), store8(c + j + 24, c3);
    }
    for (; j + 8 <= n; j += 8) {
      v8 c0 = load8(c + j);
      for (int64_t p = 0; p < r; ++p) {
        const float a = A[p * lda + i];
        c0 += v8{a, a, a, a, a, a, a, a} * load8(B + p * ldb + j);
      }
      store8(c + j, c0);
    }
    for (; j < n; ++j) {
      float acc = c[j];
      for (int64_t p = 0; p < r; ++p) acc += A[p * lda + i] * B[p * ldb + j];
      c[j] = acc;
    }
  }
}

// Runs sgemm(tile) for every tile: one parallel region, dynamic shares, costliest tiles first (the
// cheap ones then fill the gaps at the end). A failing sgemm cannot throw out of the region; its status
// is kept and reported after it.
template <typename Sgemm>
void run_tiles(const char* who, std::vector<Tile>& tiles, Sgemm&& sgemm) {
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.cost() > b.cost(); });
  const int64_t n = static_cast<int64_t>(tiles.size());
  std::atomic<int> failed{static_cast<int>(dnnl_success)};
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    const dnnl_status_t st = sgemm(tiles[static_cast<size_t>(i)]);
    if (st != dnnl_success) failed.store(static_cast<int>(st));
  }
  MEGADLM_CHECK(failed.load() == static_cast<int>(dnnl_success), who, ": dnnl_sgemm failed with status ",
                failed.load());
}

// Adds the partial sums of cut reductions into their outputs: for each output block, its pieces in
// the order of their reduction ranges (so the same sums in the same order on every run), blocks in
// parallel. out_of(tile) is the block's first element in the output, ld its row stride.
template <typename OutOf>
void add_partials(std::vector<Tile>& tiles, int64_t ld, OutOf&& out_of) {
  std::vector<Tile> parts;
  for (const Tile& t : tiles)
    if (t.partial) parts.push_back(t);
  if (parts.empty()) return;
  std::stable_sort(parts.begin(), parts.end(), [](const Tile& a, const Tile& b) {
    return std::tie(a.g, a.m0, a.n0, a.k0) < std::tie(b.g, b.m0, b.n0, b.k0);
  });
  std::vector<size_t> block_start;  // the first piece of each output block
  for (size_t i = 0; i < parts.size(); ++i)
    if (i == 0 || parts[i].g != parts[i - 1].g || parts[i].m0 != parts[i - 1].m0 || parts[i].n0 != parts[i - 1].n0)
      block_start.push_back(i);
  block_start.push_back(parts.size());
  const int64_t blocks = static_cast<int64_t>(block_start.size()) - 1;
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const Tile& first = parts[block_start[static_cast<size_t>(b)]];
    float* out = out_of(first);
    for (int64_t i = 0; i < first.m; ++i)
      for (size_t p = block_start[static_cast<size_t>(b)]; p < block_start[static_cast<size_t>(b) + 1]; ++p) {
        const float* src = parts[p].partial + i * first.n;
        float* dst = out + i * ld;
        for (int64_t j = 0; j < first.n; ++j) dst[j] += src[j];
      }
  }
}

}  // namespace

int64_t grouped_gemm_weight_reduction_pieces(int64_t G, const int64_t* offsets, int64_t N, int64_t K, int threads) {
  std::vector<GroupOutput> outputs;
  for (int64_t g = 0; g < G; ++g)
    if (offsets[g + 1] > offsets[g]) outputs.push_back({g, N, K, offsets[g + 1] - offsets[g], true});
  const double cap = cap_of(outputs, threads);
  int64_t most = 0;
  for (const GroupOutput& o : outputs) most = std::max(most, cut_of(o, cap, threads).depth);
  return most;
}

void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                          const float* const* W, float* Y) {
  check_grouped_gemm_args("grouped_gemm_forward", G, offsets, N, K);
  std::vector<GroupOutput> outputs;
  for (int64_t g = 0; g < G; ++g) outputs.push_back({g, offsets[g + 1] - offsets[g], N, K, false});
  std::vector<Tile> tiles = tiles_of(outputs, omp_get_max_threads());
  run_tiles("grouped_gemm_forward", tiles, [&](const Tile& t) {
    const int64_t r = offsets[t.g] + t.m0;  // first row of the tile in X and Y
    // Y[r.., n0..] = X[r.., :] @ (W_g[n0.., :])^T
    return dnnl_sgemm('N', 'T', t.m, t.n, K, 1.0f, X + r * K, K, W[t.g] + t.n0 * K, K, 0.0f, Y + r * N + t.n0, N);
  });
}

void grouped_gemm_backward_data(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                const float* const* W, float* dX) {
  check_grouped_gemm_args("grouped_gemm_backward_data", G, offsets, N, K);
  std::vector<GroupOutput> outputs;
  for (int64_t g = 0; g < G; ++g) outputs.push_back({g, offsets[g + 1] - offsets[g], K, N, false});
  std::vector<Tile> tiles = tiles_of(outputs, omp_get_max_threads());
  run_tiles("grouped_gemm_backward_data", tiles, [&](const Tile& t) {
    const int64_t r = offsets[t.g] + t.m0;
    // dX[r.., k0..] = dY[r.., :] @ W_g[:, k0..]
    return dnnl_sgemm('N', 'N', t.m, t.n, N, 1.0f, dY + r * N, N, W[t.g] + t.n0, K, 0.0f, dX + r * K + t.n0, K);
  });
}

void grouped_gemm_backward_weight(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* dY,
                                  const float* X, float* const* dW) {
  check_grouped_gemm_args("grouped_gemm_backward_weight", G, offsets, N, K);
  std::vector<GroupOutput> outputs;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t rows = offsets[g + 1] - offsets[g];
    if (rows > 0) outputs.push_back({g, N, K, rows, true});  // an empty group adds nothing
  }
  Plan p = plan(outputs, omp_get_max_threads());
  run_tiles("grouped_gemm_backward_weight", p.tiles, [&](const Tile& t) {
    const int64_t r0 = offsets[t.g] + t.k0;  // the piece's first row of the group
    // dW_g[m0.., n0..] += (dY[r0.., m0..])^T @ X[r0.., n0..] over the piece's `depth` rows; a later
    // piece of a cut reduction writes its sum to its partial block instead
    const float* a = dY + r0 * N + t.m0;
    const float* b = X + r0 * K + t.n0;
    if (t.partial) return dnnl_sgemm('T', 'N', t.m, t.n, t.depth, 1.0f, a, N, b, K, 0.0f, t.partial, t.n);
    float* out = dW[t.g] + t.m0 * K + t.n0;
    if (t.depth >= kFewRows) return dnnl_sgemm('T', 'N', t.m, t.n, t.depth, 1.0f, a, N, b, K, 1.0f, out, K);
    few_rows_weight_grad(t.depth, t.m, t.n, a, N, b, K, out, K);
    return dnnl_success;
  });
  add_partials(p.tiles, K, [&](const Tile& t) { return dW[t.g] + t.m0 * K + t.n0; });
}

}  // namespace megadlm::cpu
