#include "nn/moe/moe_dispatcher.h"

#include "kernels/backend.h"

namespace megadlm {

// A host array where the backend reads it: itself on the CPU, an arena copy on a device.
template <typename T>
static const T* on_backend(Arena& arena, const Backend& be, const std::vector<T>& v) {
  if (be.device() == Device::CPU || v.empty()) return v.data();
  const size_t bytes = sizeof(T) * v.size();
  T* p = static_cast<T*>(arena.allocate(bytes));
  be.copy_to_device(p, v.data(), bytes);
  return p;
}

Tensor TokenDispatcher::dispatch(Arena& arena, const Tensor& x, const MoERouting& r) {
  const int64_t N = r.N, P = r.rows();
  C_ = x.numel() / N;
  MEGADLM_CHECK(x.numel() == N * C_, "TokenDispatcher: input ", x.shape().str(), " is not [", N, ", C]");
  // token -> rows (counting sort keeps each token's rows in ascending row order: deterministic sums)
  token_offsets_.assign(static_cast<size_t>(N + 1), 0);
  for (int64_t row = 0; row < P; ++row)
    if (r.token[row] >= 0) ++token_offsets_[r.token[row] + 1];
  for (int64_t n = 0; n < N; ++n) token_offsets_[n + 1] += token_offsets_[n];
  token_rows_.resize(static_cast<size_t>(token_offsets_[N]));
  {
    std::vector<int32_t>& fill = token_offsets_;  // reuse: advance a cursor per token, then restore
    for (int64_t row = 0; row < P; ++row)
      if (r.token[row] >= 0) token_rows_[fill[r.token[row]]++] = static_cast<int32_t>(row);
    for (int64_t n = N; n > 0; --n) fill[n] = fill[n - 1];
    fill[0] = 0;
  }
  const Backend& be = backend_of(x);
  index_.token = on_backend(arena, be, r.token);
  index_.weight = on_backend(arena, be, r.weight);
  index_.offsets = on_backend(arena, be, token_offsets_);
  index_.rows = on_backend(arena, be, token_rows_);
  Tensor xp = arena.tensor({P, C_});
  if (P > 0) be.moe_permute(xp.data<float>(), x.data<float>(), index_.token, nullptr, P, C_);
  return xp;
}

void TokenDispatcher::dispatch_backward(Arena& arena, const Tensor& dxp, const MoERouting& r, Tensor& dx,
                                        bool accumulate) const {
  const Backend& be = backend_of(dx);
  if (!accumulate) {
    be.scatter_rows(dx.data<float>(), dxp.data<float>(), index_.offsets, index_.rows, r.N, C_);
    return;
  }
  const size_t mark = arena.mark();
  Tensor sum = arena.tensor(dx.shape());
  be.scatter_rows(sum.data<float>(), dxp.data<float>(), index_.offsets, index_.rows, r.N, C_);
  be.add_inplace(dx.data<float>(), sum.data<float>(), dx.numel());
  arena.release(mark);
}

Tensor TokenDispatcher::combine(Arena& arena, const Tensor& out, const MoERouting& r) {
  out_ = out;
  Tensor y = arena.tensor({r.N, C_});
  backend_of(out).moe_unpermute(y.data<float>(), out.data<float>(), index_.offsets, index_.rows, index_.weight, r.N, C_);
  return y;
}

void TokenDispatcher::combine_backward(const Tensor& dy, const MoERouting& r, Tensor& dout, float* dweight) const {
  const int64_t P = r.rows();
  if (P == 0) return;
  const Backend& be = backend_of(dy);
  be.moe_permute(dout.data<float>(), dy.data<float>(), index_.token, index_.weight, P, C_);
  be.moe_unpermute_weight_grad(dweight, dy.data<float>(), out_.data<float>(), index_.token, P, C_);
}

}  // namespace megadlm
