#pragma once
// The routed experts of one MoE layer: E independent MLPs (fc1 -> GELU or SwiGLU -> fc2) over the
// expert-contiguous rows the TokenDispatcher produced. Parameters are registered per expert
// (`<name>.E.fc1.weight`, ...), so initialisation and checkpoints do not depend on the layout.
//   grouped (--moe-grouped-gemm): one pass over all rows into shared buffers; fc1 and fc2 are each one
//            grouped product over every expert's segment (Backend::grouped_gemm_*), forward and backward,
//            the activation one call over all P rows.
//   looped:  a plain loop over experts, each a separate MLP on its own buffers (Megatron's SequentialMLP).
// Both give the same numbers to fp32 rounding (the products' summation order may differ); tests check that.
// Legend: P dispatched rows, C hidden, F expert ffn hidden (F1 = F, or 2F with SwiGLU), E experts.
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/parameters.h"
#include "nn/transformer_config.h"

namespace megadlm {

class Backend;

class MoEExperts {
 public:
  MoEExperts() = default;
  // Experts first_expert .. first_expert + num_experts - 1 of the layer (expert parallelism registers
  // only its rank's), named by their global index and marked ParamInfo.expert.
  MoEExperts(ParamStore& store, const std::string& name, const TransformerConfig& cfg, Activation activation,
             int64_t num_experts, int64_t ffn_hidden, float output_init_std, bool grouped, int64_t first_expert = 0);

  // xp [P, C] -> out [P, C] from the arena; offsets [E+1] segment bounds. Saves what backward needs.
  Tensor forward(Arena& arena, const Tensor& xp, const std::vector<int64_t>& offsets);
  // dout [P, C] -> dxp [P, C] written; parameter gradients accumulated.
  void backward(Arena& arena, const Tensor& dout, Tensor& dxp);

  void set_grouped(bool grouped) { grouped_ = grouped; }

 private:
  const Backend& be() const;  // the parameters' device's
  void fc1_segment(int64_t e, int64_t rows, const float* x, float* h) const;
  void fc2_segment(int64_t e, int64_t rows, const float* a, float* y) const;
  std::vector<const float*> values(const std::vector<int>& ids) const;  // the experts' parameter pointers
  std::vector<float*> grads(const std::vector<int>& ids) const;
  void add_biases(const std::vector<int>& bias, float* out, int64_t width) const;
  void bias_grads(const std::vector<int>& bias, const float* dout, int64_t width) const;
  void act_forward(float* a, const float* h, int64_t rows) const;
  void act_backward(float* dh, const float* h, const float* da, int64_t rows) const;
  void expert_backward(int64_t e, int64_t rows, const float* x, const float* h, const float* a, const float* dy,
                       float* dh, float* da, float* dx) const;

  ParamStore* store_ = nullptr;
  Activation act_ = Activation::Gelu;
  int64_t E_ = 0, C_ = 0, F_ = 0, F1_ = 0;
  bool grouped_ = false;
  std::vector<int> w1_, b1_, w2_, b2_;  // per expert; b = -1 without biases
  std::vector<int64_t> offsets_;
  Tensor xp_, h_, a_;                   // grouped: [P, C], [P, F1], [P, F]
  std::vector<Tensor> hs_, as_;         // looped: per expert [n_e, F1], [n_e, F]
};

}  // namespace megadlm
