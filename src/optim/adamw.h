#pragma once
// AdamW over the model's flat buffers with fp32 state: one pass per parameter group. Weight decay
// applies to matrices and embeddings, not to norms and biases (ParamInfo::weight_decay). Gradient
// clipping by the global L2 norm comes first, computed deterministically. The moments live on the
// parameters' device and the update runs there (kernels/backend.h).
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/parameters.h"

namespace megadlm {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.01f;
  float clip_grad = 1.0f;  // 0 disables clipping
};

// One AdamW update of the flat range [begin, end) of the parameters (weight decay per parameter;
// alignment padding between parameters untouched), the gradient clipped by `norm` inside the update
// (the gradient buffer is not changed). grads, m and v hold that
// range only: element i of them belongs to flat index begin + i. step counts updates from 1. Shared by
// AdamW (the whole buffer) and the distributed optimizer (its shard).
// bf16_copies (or null): per parameter id, where the updated values go in bf16 as well (null entries:
// none), the whole parameter (the range must then cover it). zero_grads: each parameter's gradient is
// set to zero on the update's pass once read (the padding between parameters is never written).
// frozen (or null): per parameter id, nonzero for a parameter that is not updated at all (its values,
// moments and gradient untouched).
void adamw_update_range(ParamStore& params, const AdamWConfig& cfg, double lr, double norm, int64_t step,
                        int64_t begin, int64_t end, float* grads, float* m, float* v,
                        const std::vector<uint16_t*>* bf16_copies = nullptr, bool zero_grads = false,
                        const std::vector<uint8_t>* frozen = nullptr);

class AdamW {
 public:
  AdamW(ParamStore& params, const AdamWConfig& cfg);

  // Clips, then updates every parameter with learning rate lr. Returns the gradient norm before
  // clipping. step counts updates from 1 (bias correction). Same as apply(lr, grad_norm()).
  double step(double lr);

  // The two halves of step(), so that a caller can look at the norm before anything changes: a
  // non-finite norm (a NaN or Inf gradient) must skip the update with parameters, moments and the
  // step count untouched, which clipping by a NaN factor would not.
  double grad_norm() const;  // global L2 norm of the gradients (deterministic order)
  void apply(double lr, double grad_norm);  // clips by grad_norm, then one AdamW update
  // The same, also writing each parameter that has a target in bf16_copies (per id; null: none) in bf16
  // on the update's pass: the bf16 weight copies (MixedPrecision::bf16_copy_targets) are then current
  // without a cast over the weights (Megatron's optimizer writes its bf16 model params the same way).
  void apply(double lr, double grad_norm, const std::vector<uint16_t*>& bf16_copies);
  // The same, leaving the gradients zero for the next step's accumulation (ParamStore::zero_grads then
  // skips its pass over them): one pass over the gradients a step instead of two. The caller must not
  // want the gradients after the update.
  void apply_and_zero_grads(double lr, double grad_norm, const std::vector<uint16_t*>& bf16_copies);

  // Parameters [first_id, end_id) of the store are frozen: no update touches their values or moments
  // (weight decay included), bit for bit (LLaVA's vision tower, or its language model, in a stage that
  // trains the rest). Their module computes no gradient for them (ClipVisionModel::set_frozen), so the
  // gradient norm is the trained parameters'.
  void freeze(int first_id, int end_id);
  bool is_frozen(int id) const { return !frozen_.empty() && frozen_.at(static_cast<size_t>(id)) != 0; }
  // Per parameter id, nonzero for a frozen one (adamw_update_range's `frozen`), or null when none is.
  const std::vector<uint8_t>* frozen_ids() const { return frozen_.empty() ? nullptr : &frozen_; }

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // The moments can be dropped while another owner keeps them (the distributed optimizer holds this
  // rank's shard): release_state() frees them, ensure_state() brings back zeroed full-size buffers
  // (for a checkpoint to be gathered into or read from).
  bool has_state() const { return has_state_; }
  void release_state();
  void ensure_state();
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }

 private:
  // The whole buffer's update behind apply and apply_and_zero_grads.
  void update(double lr, double norm, const std::vector<uint16_t*>& bf16_copies, bool zero_grads);

  ParamStore& params_;
  AdamWConfig cfg_;
  Tensor m_, v_;  // flat, like the parameters
  bool has_state_ = true;
  int64_t step_ = 0;
  std::vector<uint8_t> frozen_;  // per parameter id, or empty: none frozen
};

}  // namespace megadlm
