#include "nn/output_products.h"

#include "kernels/backend.h"

namespace megadlm {

namespace {

// t [rows, cols] fp32 -> its bf16 copy in the arena.
const uint16_t* bf16_copy(Arena& arena, const Tensor& t) {
  Tensor out = arena.tensor(t.shape(), DType::BF16);
  backend_of(t).cast_f32_to_bf16(static_cast<uint16_t*>(out.raw()), t.data<float>(), t.numel());
  return static_cast<const uint16_t*>(out.raw());
}

}  // namespace

void OutputProducts::logits(Arena& arena, const Tensor& x, Tensor& out) const {
  const Tensor& W = store_->value(w_);
  const int64_t n = x.size(0), C = x.size(1), Vl = W.size(0);
  MEGADLM_CHECK(W.size(1) == C && out.numel() == n * Vl, "output layer: rows of ", C, " features for a matrix [", Vl,
                ", ", W.size(1), "] and ", out.numel(), " logits");
  const Backend& be = backend_of(x);
  if (prec_) {
    be.gemm_bf16(false, true, n, Vl, C, 1.0f, bf16_copy(arena, x), C, prec_->weight_bf16(w_), C, 0.0f,
                 out.data<float>(), Vl);
    return;
  }
  be.gemm(false, true, n, Vl, C, 1.0f, x.data<float>(), C, W.data<float>(), C, 0.0f, out.data<float>(), Vl);
}

void OutputProducts::backward(Arena& arena, const Tensor& x, const Tensor& dlogits, Tensor& dx) const {
  const Tensor& W = store_->value(w_);
  const int64_t n = x.size(0), C = x.size(1), Vl = W.size(0);
  const Backend& be = backend_of(x);
  store_->mark_grad_written(w_);
  float* dW = store_->grad(w_).data<float>();
  if (prec_) {
    const uint16_t* gb = bf16_copy(arena, dlogits);
    const uint16_t* Wb = prec_->weight_bf16(w_);
    be.gemm_bf16(false, false, n, C, Vl, 1.0f, gb, Vl, Wb, C, 0.0f, dx.data<float>(), C);
    be.gemm_bf16(true, false, Vl, C, n, 1.0f, gb, Vl, bf16_copy(arena, x), C, 1.0f, dW, C);
    return;
  }
  be.gemm(true, false, Vl, C, n, 1.0f, dlogits.data<float>(), Vl, x.data<float>(), C, 1.0f, dW, C);
  be.gemm(false, false, n, C, Vl, 1.0f, dlogits.data<float>(), Vl, W.data<float>(), C, 0.0f, dx.data<float>(), C);
}

}  // namespace megadlm
