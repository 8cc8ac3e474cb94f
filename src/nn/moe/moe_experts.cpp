#include "nn/moe/moe_experts.h"

#include "kernels/backend.h"

namespace megadlm {

MoEExperts::MoEExperts(ParamStore& store, const std::string& name, const TransformerConfig& cfg, Activation activation,
                       int64_t num_experts, int64_t ffn_hidden, float output_init_std, bool grouped,
                       int64_t first_expert)
    : store_(&store), act_(activation), E_(num_experts), C_(cfg.hidden_size), F_(ffn_hidden), grouped_(grouped) {
  MEGADLM_CHECK(F_ >= 1, name, ": --moe-ffn-hidden-size must be positive, got ", F_);
  F1_ = act_ == Activation::SwiGLU ? 2 * F_ : F_;
  for (int64_t e = 0; e < E_; ++e) {
    const std::string p = name + "." + std::to_string(first_expert + e);
    w1_.push_back(store.add(p + ".fc1.weight", {F1_, C_}, Init::Normal, cfg.init_method_std, true));
    b1_.push_back(cfg.add_bias_linear ? store.add(p + ".fc1.bias", {F1_}, Init::Zeros, 0.0f, false) : -1);
    w2_.push_back(store.add(p + ".fc2.weight", {C_, F_}, Init::Normal, output_init_std, true));
    b2_.push_back(cfg.add_bias_linear ? store.add(p + ".fc2.bias", {C_}, Init::Zeros, 0.0f, false) : -1);
    // Expert gradients are reduced over the expert-data-parallel group (parallel_context.h).
    for (int id : {w1_.back(), b1_.back(), w2_.back(), b2_.back()})
      if (id >= 0) store.set_expert(id);
  }
}

const Backend& MoEExperts::be() const { return backend_for(store_->device()); }

// h [rows, F1] = x [rows, C] @ W1_e^T + b1_e
void MoEExperts::fc1_segment(int64_t e, int64_t rows, const float* x, float* h) const {
  be().gemm(false, true, rows, F1_, C_, 1.0f, x, C_, store_->value(w1_[e]).data<float>(), C_, 0.0f, h, F1_);
  if (b1_[e] >= 0) be().bias_add_forward(h, store_->value(b1_[e]).data<float>(), rows, F1_);
}

// y [rows, C] = a [rows, F] @ W2_e^T + b2_e
void MoEExperts::fc2_segment(int64_t e, int64_t rows, const float* a, float* y) const {
  be().gemm(false, true, rows, C_, F_, 1.0f, a, F_, store_->value(w2_[e]).data<float>(), F_, 0.0f, y, C_);
  if (b2_[e] >= 0) be().bias_add_forward(y, store_->value(b2_[e]).data<float>(), rows, C_);
}

std::vector<const float*> MoEExperts::values(const std::vector<int>& ids) const {
  std::vector<const float*> p;
  for (int id : ids) p.push_back(store_->value(id).data<float>());
  return p;
}

std::vector<float*> MoEExperts::grads(const std::vector<int>& ids) const {
  std::vector<float*> p;
  for (int id : ids) p.push_back(store_->grad(id).data<float>());
  return p;
}

// out [P, width] rows of expert e += bias_e, for experts with a bias and rows (grouped path).
void MoEExperts::add_biases(const std::vector<int>& bias, float* out, int64_t width) const {
  for (int64_t e = 0; e < E_; ++e) {
    const int64_t r0 = offsets_[e], n = offsets_[e + 1] - r0;
    if (bias[e] >= 0 && n > 0) be().bias_add_forward(out + r0 * width, store_->value(bias[e]).data<float>(), n, width);
  }
}

// dbias_e += column sums of dout [P, width] over expert e's rows (grouped path).
void MoEExperts::bias_grads(const std::vector<int>& bias, const float* dout, int64_t width) const {
  for (int64_t e = 0; e < E_; ++e) {
    const int64_t r0 = offsets_[e], n = offsets_[e + 1] - r0;
    if (bias[e] >= 0 && n > 0) be().bias_backward(store_->grad(bias[e]).data<float>(), dout + r0 * width, n, width);
  }
}

void MoEExperts::act_forward(float* a, const float* h, int64_t rows) const {
  if (act_ == Activation::Gelu) be().gelu_forward(a, h, rows * F_);
  else be().swiglu_forward(a, h, rows, F_);
}

void MoEExperts::act_backward(float* dh, const float* h, const float* da, int64_t rows) const {
  if (act_ == Activation::Gelu) be().gelu_backward(dh, h, da, rows * F_);
  else be().swiglu_backward(dh, h, da, rows, F_);
}

Tensor MoEExperts::forward(Arena& arena, const Tensor& xp, const std::vector<int64_t>& offsets) {
  const int64_t P = offsets.back();
  MEGADLM_CHECK(static_cast<int64_t>(offsets.size()) == E_ + 1 && xp.numel() == P * C_, "MoEExperts: input ",
                xp.shape().str(), " does not match ", P, " dispatched rows of width ", C_);
  offsets_ = offsets;
  xp_ = xp;
  Tensor out = arena.tensor({P, C_});
  const float* x = xp.data<float>();
  float* y = out.data<float>();
  if (grouped_) {
    // fc1 and fc2 each one grouped product over every expert's rows; the activation one pass over all rows.
    h_ = arena.tensor({P, F1_});
    a_ = arena.tensor({P, F_});
    be().grouped_gemm_forward(E_, offsets_.data(), F1_, C_, x, values(w1_).data(), h_.data<float>());
    add_biases(b1_, h_.data<float>(), F1_);
    act_forward(a_.data<float>(), h_.data<float>(), P);
    be().grouped_gemm_forward(E_, offsets_.data(), C_, F_, a_.data<float>(), values(w2_).data(), y);
    add_biases(b2_, y, C_);
  } else {
    hs_.assign(static_cast<size_t>(E_), Tensor());
    as_.assign(static_cast<size_t>(E_), Tensor());
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
      if (n == 0) continue;
      hs_[e] = arena.tensor({n, F1_});
      as_[e] = arena.tensor({n, F_});
      fc1_segment(e, n, x + r0 * C_, hs_[e].data<float>());
      act_forward(as_[e].data<float>(), hs_[e].data<float>(), n);
      fc2_segment(e, n, as_[e].data<float>(), y + r0 * C_);
    }
  }
  return out;
}

// One expert's backward over its rows: dy [n, C] -> dx [n, C] written; dW, db accumulated.
// dh [n, F1] and da [n, F] are scratch.
void MoEExperts::expert_backward(int64_t e, int64_t n, const float* x, const float* h, const float* a,
                                 const float* dy, float* dh, float* da, float* dx) const {
  // fc2: da [n, F] = dy [n, C] @ W2 [C, F];  dW2 [C, F] += dy^T @ a;  db2 += sum dy
  be().gemm(false, false, n, F_, C_, 1.0f, dy, C_, store_->value(w2_[e]).data<float>(), F_, 0.0f, da, F_);
  be().gemm(true, false, C_, F_, n, 1.0f, dy, C_, a, F_, 1.0f, store_->grad(w2_[e]).data<float>(), F_);
  if (b2_[e] >= 0) be().bias_backward(store_->grad(b2_[e]).data<float>(), dy, n, C_);
  act_backward(dh, h, da, n);
  // fc1: dx [n, C] = dh [n, F1] @ W1 [F1, C];  dW1 [F1, C] += dh^T @ x;  db1 += sum dh
  be().gemm(false, false, n, C_, F1_, 1.0f, dh, F1_, store_->value(w1_[e]).data<float>(), C_, 0.0f, dx, C_);
  be().gemm(true, false, F1_, C_, n, 1.0f, dh, F1_, x, C_, 1.0f, store_->grad(w1_[e]).data<float>(), C_);
  if (b1_[e] >= 0) be().bias_backward(store_->grad(b1_[e]).data<float>(), dh, n, F1_);
}

void MoEExperts::backward(Arena& arena, const Tensor& dout, Tensor& dxp) {
  const int64_t P = offsets_.back();
  const size_t mark = arena.mark();
  const float* x = xp_.data<float>();
  const float* dy = dout.data<float>();
  float* dx = dxp.data<float>();
  if (grouped_) {
    Tensor da = arena.tensor({P, F_});
    Tensor dh = arena.tensor({P, F1_});
    float* dap = da.data<float>();
    float* dhp = dh.data<float>();
    // fc2: da [P, F] = dy @ W2_e, dW2_e += dy^T a; one activation backward over all rows; then fc1:
    // dx [P, C] = dh @ W1_e, dW1_e += dh^T x. Each product one grouped call over every expert's rows.
    be().grouped_gemm_backward_data(E_, offsets_.data(), C_, F_, dy, values(w2_).data(), dap);
    be().grouped_gemm_backward_weight(E_, offsets_.data(), C_, F_, dy, a_.data<float>(), grads(w2_).data());
    bias_grads(b2_, dy, C_);
    act_backward(dhp, h_.data<float>(), dap, P);
    be().grouped_gemm_backward_data(E_, offsets_.data(), F1_, C_, dhp, values(w1_).data(), dx);
    be().grouped_gemm_backward_weight(E_, offsets_.data(), F1_, C_, dhp, x, grads(w1_).data());
    bias_grads(b1_, dhp, F1_);
  } else {
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t r0 = offsets_[e], n = offsets_[e + 1] - r0;
      if (n == 0) continue;
      const size_t m = arena.mark();
      Tensor da = arena.tensor({n, F_});
      Tensor dh = arena.tensor({n, F1_});
      expert_backward(e, n, x + r0 * C_, hs_[e].data<float>(), as_[e].data<float>(), dy + r0 * C_, dh.data<float>(),
                      da.data<float>(), dx + r0 * C_);
      arena.release(m);
    }
  }
  arena.release(mark);
}

}  // namespace megadlm
