#include "nn/norm.h"

#include <algorithm>

#include "kernels/backend.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

NormKind norm_kind_from_name(const std::string& name) {
  if (name == "LayerNorm") return NormKind::LayerNorm;
  if (name == "RMSNorm") return NormKind::RMSNorm;
  fail("--normalization: unknown value '", name, "' (expected LayerNorm or RMSNorm)");
}

Norm::Norm(ParamStore& store, const std::string& name, NormKind kind, int64_t C, float eps, bool bias,
           const ParallelContext* ctx)
    : store_(&store), ctx_(ctx), kind_(kind), C_(C), eps_(eps) {
  w_ = store.add(name + ".weight", {C}, Init::Ones, 0.0f, /*weight_decay=*/false);
  if (kind == NormKind::LayerNorm && bias) b_ = store.add(name + ".bias", {C}, Init::Zeros, 0.0f, false);
}

Tensor Norm::forward(Arena& arena, const Tensor& x) { return forward(arena, x, arena); }

Tensor Norm::forward(Arena& arena, const Tensor& x, Arena& out_arena) {
  const Backend& be = backend_of(x);
  const int64_t N = x.numel() / C_;
  saved_x_ = x;
  Tensor y = out_arena.tensor({N, C_});
  rstd_ = arena.tensor({N});
  const float* w = store_->value(w_).data<float>();
  if (kind_ == NormKind::LayerNorm) {
    mean_ = arena.tensor({N});
    be.layernorm_forward(y.data<float>(), mean_.data<float>(), rstd_.data<float>(), x.data<float>(), w,
                           b_ >= 0 ? store_->value(b_).data<float>() : nullptr, N, C_, eps_);
  } else {
    be.rmsnorm_forward(y.data<float>(), rstd_.data<float>(), x.data<float>(), w, N, C_, eps_);
  }
  return y;
}

void Norm::backward(const Tensor& dy, Tensor& dx) {
  const Backend& be = backend_of(dy);
  const int64_t N = dy.numel() / C_;
  const float* w = store_->value(w_).data<float>();
  // Sequence parallel: this rank's rows give a partial weight gradient, made in a zeroed staging
  // buffer [dw | db] and summed over the tp ranks.
  const bool split = ctx_ && sequence_parallel(*ctx_);
  float* part = split ? tp_scratch(2 * C_, 1, be.device()) : nullptr;
  if (split) be.zero(part, sizeof(float) * 2 * static_cast<size_t>(C_));
  float* dw = split ? part : store_->grad(w_).data<float>();
  float* db = b_ < 0 ? nullptr : split ? part + C_ : store_->grad(b_).data<float>();
  if (kind_ == NormKind::LayerNorm) {
    be.layernorm_backward(dx.data<float>(), dw, db, dy.data<float>(), saved_x_.data<float>(), w,
                            mean_.data<float>(), rstd_.data<float>(), N, C_);
  } else {
    be.rmsnorm_backward(dx.data<float>(), dw, dy.data<float>(), saved_x_.data<float>(), w, rstd_.data<float>(),
                          N, C_);
  }
  if (split) {
    const int64_t n = b_ >= 0 ? 2 * C_ : C_;
    tp_all_reduce_sum(*ctx_, part, n, be.device());
    be.add_inplace(store_->grad(w_).data<float>(), part, C_);
    if (b_ >= 0) be.add_inplace(store_->grad(b_).data<float>(), part + C_, C_);
  }
}

}  // namespace megadlm
