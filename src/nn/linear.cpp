#include "nn/linear.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

namespace megadlm {

Linear::Linear(ParamStore& store, const ParallelContext& ctx, const std::string& name, int64_t in_features,
               int64_t out_features, bool bias, float init_std, LinearParallel mode)
    : store_(&store), ctx_(&ctx), mode_(mode), in_(in_features), out_(out_features) {
  MDLM_CHECK(ctx.tp.size == 1, name, ": tensor parallelism is not available in this build yet");
  w_ = store.add(name + ".weight", {out_, in_}, Init::Normal, init_std, /*weight_decay=*/true);
  if (bias) b_ = store.add(name + ".bias", {out_}, Init::Zeros, 0.0f, /*weight_decay=*/false);
}

Tensor Linear::forward(Arena& arena, const Tensor& x) {
  const int64_t N = x.numel() / in_;
  MDLM_CHECK(x.numel() == N * in_, "Linear: input ", x.shape().str(), " is not [N, ", in_, "]");
  saved_x_ = x;
  Tensor y = arena.tensor({N, out_});
  const float* W = store_->value(w_).data<float>();
  cpu::gemm(false, true, N, out_, in_, 1.0f, x.data<float>(), in_, W, in_, 0.0f, y.data<float>(), out_);
  if (b_ >= 0) cpu::bias_add_forward(y.data<float>(), store_->value(b_).data<float>(), N, out_);
  if (mode_ == LinearParallel::Row) tp_all_reduce_sum(*ctx_, y.data<float>(), y.numel());
  return y;
}

void Linear::backward(const Tensor& dy, Tensor& dx, bool accumulate_dx) {
  const int64_t N = dy.numel() / out_;
  const float* x = saved_x_.data<float>();
  const float* W = store_->value(w_).data<float>();
  // dx [N, I] = dy [N, O] @ W [O, I]
  cpu::gemm(false, false, N, in_, out_, 1.0f, dy.data<float>(), out_, W, in_, accumulate_dx ? 1.0f : 0.0f,
            dx.data<float>(), in_);
  if (mode_ == LinearParallel::Column) tp_all_reduce_sum(*ctx_, dx.data<float>(), dx.numel());
  // dW [O, I] += dy^T [O, N] @ x [N, I]
  cpu::gemm(true, false, out_, in_, N, 1.0f, dy.data<float>(), out_, x, in_, 1.0f,
            store_->grad(w_).data<float>(), in_);
  if (b_ >= 0) cpu::bias_backward(store_->grad(b_).data<float>(), dy.data<float>(), N, out_);
}

}  // namespace megadlm
