#include "optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

#include "kernels/backend.h"

namespace megadlm {

AdamW::AdamW(ParamStore& params, const AdamWConfig& cfg) : params_(params), cfg_(cfg) {
  m_ = Tensor::zeros({params.numel()}, DType::F32, params.device());
  v_ = Tensor::zeros({params.numel()}, DType::F32, params.device());
}

void AdamW::release_state() {
  m_ = Tensor();
  v_ = Tensor();
  has_state_ = false;
}

void AdamW::ensure_state() {
  if (has_state_) return;
  m_ = Tensor::zeros({params_.numel()}, DType::F32, params_.device());
  v_ = Tensor::zeros({params_.numel()}, DType::F32, params_.device());
  has_state_ = true;
}

double AdamW::grad_norm() const {
  return std::sqrt(backend_for(params_.device()).sum_squares(params_.grads(), params_.numel()));
}

double AdamW::step(double lr) {
  const double norm = grad_norm();
  apply(lr, norm);
  return norm;
}

void adamw_update_range(ParamStore& params, const AdamWConfig& cfg, double lr, double norm, int64_t step,
                        int64_t begin, int64_t end, float* grads, float* m, float* v,
                        const std::vector<uint16_t*>* bf16_copies, bool zero_grads,
                        const std::vector<uint8_t>* frozen) {
  AdamWParams h;
  h.zero_grad = zero_grads;
  // Clipping scales the gradient inside the update's own pass (the gradient buffer is left as it is).
  if (cfg.clip_grad > 0 && norm > cfg.clip_grad) h.grad_scale = static_cast<float>(cfg.clip_grad / (norm + 1e-6));
  h.lr = static_cast<float>(lr);
  h.beta1 = cfg.beta1;
  h.beta2 = cfg.beta2;
  h.eps = cfg.eps;
  h.step = step;
  // A parameter may straddle the range's ends (a dp shard): only its part inside is updated.
  const Backend& be = backend_for(params.device());
  const std::vector<ParamInfo>& infos = params.infos();
  for (size_t id = 0; id < infos.size(); ++id) {
    const ParamInfo& p = infos[id];
    const int64_t a = std::max(p.offset, begin), b = std::min(p.offset + p.shape.numel(), end);
    if (a >= b) continue;
    if (frozen && id < frozen->size() && (*frozen)[id]) {
      // Not updated, but its gradient is cleared with the others' (the caller notes every gradient
      // zero: left, it would add into the next step's, which claims it unwritten no more).
      if (zero_grads) be.zero(grads + (a - begin), sizeof(float) * static_cast<size_t>(b - a));
      continue;
    }
    h.weight_decay = p.weight_decay ? cfg.weight_decay : 0.0f;
    uint16_t* copy = bf16_copies && id < bf16_copies->size() ? (*bf16_copies)[id] : nullptr;
    MEGADLM_CHECK(copy == nullptr || (a == p.offset && b == p.offset + p.shape.numel()), "AdamW: the bf16 copy of '",
                  p.name, "' needs the whole parameter in the updated range");
    be.adamw_step(params.values() + a, grads + (a - begin), m + (a - begin), v + (a - begin), b - a, h, copy);
  }
}

void AdamW::apply(double lr, double norm) { apply(lr, norm, {}); }

void AdamW::apply(double lr, double norm, const std::vector<uint16_t*>& bf16_copies) {
  update(lr, norm, bf16_copies, /*zero_grads=*/false);
}

void AdamW::apply_and_zero_grads(double lr, double norm, const std::vector<uint16_t*>& bf16_copies) {
  update(lr, norm, bf16_copies, /*zero_grads=*/true);
  params_.note_grads_zeroed();
}

void AdamW::update(double lr, double norm, const std::vector<uint16_t*>& bf16_copies, bool zero_grads) {
  MEGADLM_CHECK(has_state_, "AdamW: an update after release_state()");
  ++step_;
  adamw_update_range(params_, cfg_, lr, norm, step_, 0, params_.numel(), params_.grads(), m_.data<float>(),
                     v_.data<float>(), bf16_copies.empty() ? nullptr : &bf16_copies, zero_grads, frozen_ids());
}

void AdamW::freeze(int first_id, int end_id) {
  MEGADLM_CHECK(0 <= first_id && first_id <= end_id && end_id <= params_.count(), "AdamW::freeze: parameters [",
                first_id, ", ", end_id, ") are not among the ", params_.count(), " of the model");
  frozen_.resize(static_cast<size_t>(params_.count()), 0);
  for (int id = first_id; id < end_id; ++id) frozen_[static_cast<size_t>(id)] = 1;
}

}  // namespace megadlm
