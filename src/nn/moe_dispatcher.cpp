#include "nn/moe_dispatcher.h"

#include <cstring>

namespace megadlm {

// Below this many elements a loop runs on one thread: an OpenMP fork/join costs more than the work.
static constexpr int64_t kMinParallelWork = 1 << 14;

Tensor TokenDispatcher::dispatch(Arena& arena, const Tensor& x, const MoERouting& r) {
  const int64_t N = r.N, P = r.rows();
  C_ = x.numel() / N;
  MDLM_CHECK(x.numel() == N * C_, "TokenDispatcher: input ", x.shape().str(), " is not [", N, ", C]");
  // token -> rows (counting sort keeps each token's rows in ascending row order: deterministic sums)
  token_offsets_.assign(static_cast<size_t>(N + 1), 0);
  for (int64_t row = 0; row < P; ++row)
    if (r.token[row] >= 0) ++token_offsets_[r.token[row] + 1];
  for (int64_t n = 0; n < N; ++n) token_offsets_[n + 1] += token_offsets_[n];
  token_rows_.resize(static_cast<size_t>(token_offsets_[N]));
  {
    std::vector<int64_t>& fill = token_offsets_;  // reuse: advance a cursor per token, then restore
    for (int64_t row = 0; row < P; ++row)
      if (r.token[row] >= 0) token_rows_[fill[r.token[row]]++] = static_cast<int32_t>(row);
    for (int64_t n = N; n > 0; --n) fill[n] = fill[n - 1];
    fill[0] = 0;
  }
  Tensor xp = arena.tensor({P, C_});
  const float* xs = x.data<float>();
  float* xd = xp.data<float>();
  const int64_t C = C_;
#pragma omp parallel for schedule(static) if (P * C >= kMinParallelWork)
  for (int64_t row = 0; row < P; ++row) {
    const int32_t n = r.token[row];
    if (n >= 0) std::memcpy(xd + row * C, xs + n * C, sizeof(float) * C);
    else std::memset(xd + row * C, 0, sizeof(float) * C);
  }
  return xp;
}

void TokenDispatcher::dispatch_backward(const Tensor& dxp, const MoERouting& r, Tensor& dx, bool accumulate) const {
  const int64_t N = r.N, C = C_;
  const float* g = dxp.data<float>();
  float* d = dx.data<float>();
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    float* dn = d + n * C;
    if (!accumulate) std::memset(dn, 0, sizeof(float) * C);
    for (int64_t i = token_offsets_[n]; i < token_offsets_[n + 1]; ++i) {
      const float* gr = g + static_cast<int64_t>(token_rows_[i]) * C;
      for (int64_t c = 0; c < C; ++c) dn[c] += gr[c];
    }
  }
}

Tensor TokenDispatcher::combine(Arena& arena, const Tensor& out, const MoERouting& r) {
  const int64_t N = r.N, C = C_;
  out_ = out;
  Tensor y = arena.tensor({N, C});
  const float* o = out.data<float>();
  float* yd = y.data<float>();
#pragma omp parallel for schedule(static) if (N * C >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    float* yn = yd + n * C;
    std::memset(yn, 0, sizeof(float) * C);
    for (int64_t i = token_offsets_[n]; i < token_offsets_[n + 1]; ++i) {
      const int32_t row = token_rows_[i];
      const float w = r.weight[row];
      const float* orow = o + static_cast<int64_t>(row) * C;
      for (int64_t c = 0; c < C; ++c) yn[c] += w * orow[c];
    }
  }
  return y;
}

void TokenDispatcher::combine_backward(const Tensor& dy, const MoERouting& r, Tensor& dout, float* dweight) const {
  const int64_t P = r.rows(), C = C_;
  const float* g = dy.data<float>();
  const float* o = out_.data<float>();
  float* d = dout.data<float>();
#pragma omp parallel for schedule(static) if (P * C >= kMinParallelWork)
  for (int64_t row = 0; row < P; ++row) {
    const int32_t n = r.token[row];
    float* drow = d + row * C;
    if (n < 0) {
      std::memset(drow, 0, sizeof(float) * C);
      dweight[row] = 0.0f;
      continue;
    }
    const float* gn = g + static_cast<int64_t>(n) * C;
    const float* orow = o + row * C;
    const float w = r.weight[row];
    double dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      drow[c] = w * gn[c];
      dot += static_cast<double>(gn[c]) * orow[c];
    }
    dweight[row] = static_cast<float>(dot);
  }
}

}  // namespace megadlm
