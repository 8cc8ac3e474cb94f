#include "optim/adamw.h"

#include <cmath>

#include "core/error.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/optim.h"

namespace megadlm {

AdamW::AdamW(ParamStore& params, const AdamWConfig& cfg) : params_(params), cfg_(cfg) {
  m_ = Tensor::zeros({params.numel()}, DType::F32);
  v_ = Tensor::zeros({params.numel()}, DType::F32);
}

void AdamW::release_state() {
  m_ = Tensor();
  v_ = Tensor();
  has_state_ = false;
}

void AdamW::ensure_state() {
  if (has_state_) return;
  m_ = Tensor::zeros({params_.numel()}, DType::F32);
  v_ = Tensor::zeros({params_.numel()}, DType::F32);
  has_state_ = true;
}

double AdamW::grad_norm() const { return std::sqrt(cpu::sum_squares(params_.grads(), params_.numel())); }

double AdamW::step(double lr) {
  const double norm = grad_norm();
  apply(lr, norm);
  return norm;
}

void AdamW::apply(double lr, double norm) {
  MDLM_CHECK(has_state_, "AdamW::apply after release_state()");
  if (cfg_.clip_grad > 0 && norm > cfg_.clip_grad)
    cpu::scale_inplace(params_.grads(), static_cast<float>(cfg_.clip_grad / (norm + 1e-6)), params_.numel());
  ++step_;
  cpu::AdamWParams h;
  h.lr = static_cast<float>(lr);
  h.beta1 = cfg_.beta1;
  h.beta2 = cfg_.beta2;
  h.eps = cfg_.eps;
  h.step = step_;
  for (const ParamInfo& p : params_.infos()) {
    h.weight_decay = p.weight_decay ? cfg_.weight_decay : 0.0f;
    const int64_t n = p.shape.numel();
    cpu::adamw_step(params_.values() + p.offset, params_.grads() + p.offset, m_.data<float>() + p.offset,
                    v_.data<float>() + p.offset, n, h);
  }
}

}  // namespace megadlm
