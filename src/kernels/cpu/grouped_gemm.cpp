// Grouped products over experts: one parallel pass over a flattened list of output tiles (grouped_gemm.h).
#include "kernels/cpu/grouped_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include "core/error.h"
#include "kernels/grouped_gemm_args.h"

namespace megadlm::cpu {

namespace {

// A work item: rows [m0, m0 + m) and columns [n0, n0 + n) of group g's output, whose reduction has
// `depth` terms (its cost is m * n * depth).
struct Tile {
  int64_t g, m0, m, n0, n, depth;
  double cost() const { return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(depth); }
};

// One group's output [rows, cols] with a reduction of `depth` terms.
struct GroupOutput {
  int64_t g, rows, cols, depth;
  double cost() const { return static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(depth); }
};

// Work items are cut no smaller than this many rows or columns: below that oneDNN's per-call packing
// and setup are no longer small beside the tile's multiply-adds.
constexpr int64_t kMinSide = 64;
// Pieces are cut to at most 1 / (kPiecesPerThread * threads) of the whole work, so that the dynamic
// shares (costliest first) can even out the threads' loads.
constexpr int64_t kPiecesPerThread = 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The outputs cut into work items as coarse as the balance allows: an output whose cost fits within the
// share above stays one item (one sgemm, as efficient as the whole product); a larger one is cut along
// its rows first and along its columns only when rows alone cannot make the pieces small enough.
// oneDNN runs a whole product measurably faster than the same product cut into small tiles, so
// cutting only as far as the threads need keeps the per-thread rate of the loop.
std::vector<Tile> cut(const std::vector<GroupOutput>& outputs, int threads) {
  double total = 0;
  for (const GroupOutput& o : outputs) total += o.cost();
  const double cap = total / static_cast<double>(kPiecesPerThread * std::max(threads, 1));
  std::vector<Tile> tiles;
  for (const GroupOutput& o : outputs) {
    if (o.rows == 0 || o.cols == 0) continue;
    const int64_t pieces = threads > 1 ? std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.cost() / cap))) : 1;
    const int64_t row_pieces = std::min(pieces, ceil_div(o.rows, kMinSide));
    const int64_t col_pieces = std::min(ceil_div(pieces, row_pieces), ceil_div(o.cols, kMinSide));
    const int64_t tm = ceil_div(o.rows, row_pieces), tn = ceil_div(o.cols, col_pieces);
    for (int64_t m0 = 0; m0 < o.rows; m0 += tm)
      for (int64_t n0 = 0; n0 < o.cols; n0 += tn)
        tiles.push_back({o.g, m0, std::min(tm, o.rows - m0), n0, std::min(tn, o.cols - n0), o.depth});
  }
  return tiles;
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

}  // namespace

void grouped_gemm_forward(int64_t G, const int64_t* offsets, int64_t N, int64_t K, const float* X,
                          const float* const* W, float* Y) {
  check_grouped_gemm_args("grouped_gemm_forward", G, offsets, N, K);
  std::vector<GroupOutput> outputs;
  for (int64_t g = 0; g < G; ++g) outputs.push_back({g, offsets[g + 1] - offsets[g], N, K});
  std::vector<Tile> tiles = cut(outputs, omp_get_max_threads());
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
  for (int64_t g = 0; g < G; ++g) outputs.push_back({g, offsets[g + 1] - offsets[g], K, N});
  std::vector<Tile> tiles = cut(outputs, omp_get_max_threads());
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
    if (rows > 0) outputs.push_back({g, N, K, rows});  // an empty group adds nothing
  }
  std::vector<Tile> tiles = cut(outputs, omp_get_max_threads());
  run_tiles("grouped_gemm_backward_weight", tiles, [&](const Tile& t) {
    const int64_t r0 = offsets[t.g];
    // dW_g[n0.., k0..] += (dY[r0.., n0..])^T @ X[r0.., k0..], over the group's `depth` rows
    return dnnl_sgemm('T', 'N', t.m, t.n, t.depth, 1.0f, dY + r0 * N + t.m0, N, X + r0 * K + t.n0, K, 1.0f,
                      dW[t.g] + t.m0 * K + t.n0, K);
  });
}

}  // namespace megadlm::cpu
