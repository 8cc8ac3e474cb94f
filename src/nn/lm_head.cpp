#include "nn/lm_head.h"

#include <algorithm>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gemm.h"

namespace megadlm {

LMHead::LMHead(ParamStore& store, const TransformerConfig& cfg, int tied_weight_id)
    : store_(&store), V_(cfg.vocab_size), C_(cfg.hidden_size), w_(tied_weight_id) {
  if (w_ < 0) w_ = store.add("lm_head.weight", {V_, C_}, Init::Normal, cfg.init_method_std, true);
}

Tensor LMHead::logits(Arena& arena, const Tensor& x) {
  const int64_t N = x.numel() / C_;
  Tensor out = arena.tensor({N, V_});
  cpu::gemm(false, true, N, V_, C_, 1.0f, x.data<float>(), C_, store_->value(w_).data<float>(), C_, 0.0f,
            out.data<float>(), V_);
  return out;
}

double LMHead::loss_and_backward(Arena& arena, const Tensor& x, const int32_t* targets, const float* weights,
                                 float grad_scale, Tensor& dx, float* per_token_loss) {
  const int64_t N = x.numel() / C_;
  const size_t mark = arena.mark();
  Tensor lg = logits(arena, x);
  Tensor losses = arena.tensor({N});
  float* dlogits = lg.data<float>();  // in place
  const double total = cpu::cross_entropy_forward_backward(losses.data<float>(), dlogits, lg.data<float>(),
                                                           targets, weights, -100, grad_scale, N, V_);
  if (per_token_loss) std::copy(losses.data<float>(), losses.data<float>() + N, per_token_loss);
  // dx [N, C] = dlogits [N, V] @ W [V, C];  dW [V, C] += dlogits^T @ x
  cpu::gemm(false, false, N, C_, V_, 1.0f, dlogits, V_, store_->value(w_).data<float>(), C_, 0.0f,
            dx.data<float>(), C_);
  cpu::gemm(true, false, V_, C_, N, 1.0f, dlogits, V_, x.data<float>(), C_, 1.0f, store_->grad(w_).data<float>(), C_);
  arena.release(mark);
  return total;
}

}  // namespace megadlm
