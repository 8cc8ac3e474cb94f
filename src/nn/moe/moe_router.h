#pragma once
// The MoE router: logits = x W^T (W [E, C], Megatron's router.weight), a score function (softmax or
// sigmoid), the assignment of tokens to experts (token choice top-k with an optional capacity, or
// expert choice), and the load-balancing (Switch aux loss, per-sequence aux loss) and z losses.
// Its output is an MoERouting: rows grouped by expert, which the TokenDispatcher permutes by.
// Legend: N tokens (B*T), C hidden, E experts, k experts per token, P dispatched rows.
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/parameters.h"
#include "nn/moe/moe_config.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// The routing of one micro-batch. Rows of one expert are contiguous (segment e is
// [offsets[e], offsets[e+1])) and in ascending token order, as Megatron's permute orders them.
struct MoERouting {
  int64_t N = 0, E = 0;
  std::vector<int64_t> offsets;  // [E+1]
  std::vector<int32_t> token;    // [P] token of each row; -1 for a padding row (pad to capacity)
  std::vector<float> weight;     // [P] combine weight (router probability); 0 for padding
  std::vector<int32_t> source;   // [P] index of the router probability the weight came from; -1 for padding
  // Statistics of this micro-batch (under context parallelism: of its whole sequences, summed over the
  // cp group, so every cp rank reports what one process would).
  std::vector<int64_t> tokens_per_expert;  // [E] rows carrying a token, after capacity dropping
  int64_t assignments = 0;  // token choice: N k wanted assignments; expert choice: N tokens
  int64_t dropped = 0;      // token choice: assignments over capacity; expert choice: tokens no expert took
  int64_t capacity = 0;     // rows per expert allowed (0 = unlimited)
  double aux_loss = 0;      // load-balancing loss, coefficient included
  double z_loss = 0;        // z loss, coefficient included
  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

class MoERouter {
 public:
  MoERouter() = default;
  MoERouter(ParamStore& store, const std::string& name, const MoEConfig& cfg, int64_t hidden, float init_std);

  // x [N, C] with N = B*T (B, T only matter for the per-sequence aux loss). Saves what backward needs.
  void forward(Arena& arena, const Tensor& x, int64_t B, int64_t T, MoERouting& out);
  // dweight [P] (on the model's device): gradient of the loss w.r.t. routing.weight. Adds the aux and z
  // loss gradients, scaled by loss_scale (Megatron's MoEAuxLossAutoScaler scale). dx [N, C] and dW
  // accumulated.
  void backward(Arena& arena, const MoERouting& routing, const float* dweight, float loss_scale, Tensor& dx);

  int weight_id() const { return w_; }

  // Context parallelism: x holds this rank's chunks of every sequence; the aux and z losses and the
  // statistics are those of the whole sequences (the top-k counts summed over `cp`, the normalisers
  // counting every rank's tokens), so the gradients are the one-process ones restricted to this rank's
  // tokens. Token choice without a capacity only: a capacity or expert choice ranks all of a batch's
  // tokens together (train/parallel_arguments.cpp refuses them with cp).
  void set_context_parallel(const ParallelGroup& cp);

 private:
  void route_token_choice(MoERouting& r);
  void route_expert_choice(MoERouting& r);
  // Sums `n` values over the cp group (nothing without context parallelism).
  void sum_over_cp(double* v, int64_t n) const;

  ParamStore* store_ = nullptr;
  MoEConfig cfg_;
  int64_t C_ = 0, E_ = 0, k_ = 0, B_ = 0, T_ = 0, N_ = 0;
  ParallelGroup cp_;    // size 1 without context parallelism
  int64_t Tg_ = 0, Ng_ = 0;  // the whole sequences' T and B*T: cp_.size times this rank's
  int w_ = -1;
  Tensor x_;  // [N, C] saved input, on the model's device
  // On the host whatever the device (the routing is host work): logits [N, E], their softmax (softmax
  // score) or sigmoid (sigmoid score), their log-sum-exp [N] (z loss); the backward's d loss / d logits
  // [N, E], d loss / d probs_ [N k], and on a device the downloaded router-weight gradient [P].
  std::vector<float> logits_, scores_, lse_, dl_, dp_, dweight_;
  std::vector<int32_t> sel_;     // [N k] selected experts per token, best first (token choice)
  std::vector<float> probs_;     // [N k] their routing probabilities
  std::vector<int64_t> counts_;  // [E] or [B, E]: top-k counts for the aux loss (before dropping), whole sequences
  std::vector<double> reduce_;   // scratch: what goes over the cp group
  std::vector<int32_t> cand_;    // scratch: candidate rows of one expert
};

}  // namespace megadlm
