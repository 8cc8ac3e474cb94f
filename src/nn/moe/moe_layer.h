#pragma once
// The Mixture-of-Experts block that replaces the MLP of a layer (Megatron's MoELayer):
//   routing = router(x);  xp = dispatch(x);  out = experts(xp);  y = combine(out) [+ shared_experts(x)]
// The router's load-balancing and z losses do not flow through y: like Megatron's
// MoEAuxLossAutoScaler, backward() adds their gradients (times aux_loss_scale) to the router's.
// Per-layer statistics (tokens per expert, dropped fraction, aux and z loss) accumulate over the
// micro-batches that ran backward (so evaluation forwards do not count) until take_stats().
// Legend: N tokens (B*T), C hidden, E experts, P dispatched rows.
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "nn/mlp.h"
#include "nn/moe/moe_dispatcher.h"
#include "nn/moe/moe_ep_exchange.h"
#include "nn/moe/moe_experts.h"
#include "nn/moe/moe_router.h"
#include "nn/sublayer.h"
#include "nn/transformer_config.h"

namespace megadlm {

struct MoEStats {
  std::vector<double> tokens_per_expert;  // [E] summed over micro-batches
  double assignments = 0, dropped = 0;    // see MoERouting
  double aux_loss = 0, z_loss = 0;        // summed over micro-batches
  int64_t micro_batches = 0;
  double dropped_fraction() const { return assignments > 0 ? dropped / assignments : 0.0; }
};

class MoELayer : public Sublayer {
 public:
  // The experts' (and shared experts') activation as given; the sizes and routing from cfg and cfg.moe.
  MoELayer(ParamStore& store, const ParallelContext& ctx, const std::string& name, const TransformerConfig& cfg,
           Activation activation, float output_init_std);

  Tensor forward(Arena& arena, const Tensor& x, const BatchInfo& batch) override;  // x [N, C] -> [N, C]
  void backward(Arena& arena, const Tensor& dy, Tensor& dx) override;              // dx [N, C] written
  // The experts and the shared experts run fp32 products under every precision policy.
  void set_precision(MixedPrecision*) override {}
  // The experts keep views of their dispatched rows, which are made from x.
  bool keeps_input() const override { return true; }

  void set_grouped_gemm(bool g) { experts_.set_grouped(g); }
  const MoERouting& last_routing() const { return routing_; }
  const MoEStats& stats() const { return stats_; }
  MoEStats take_stats();  // returns and resets
  const std::string& name() const { return name_; }
  int64_t num_experts() const { return cfg_.num_experts; }

 private:
  std::string name_;
  MoEConfig cfg_;
  int64_t C_ = 0;
  MoERouter router_;
  TokenDispatcher dispatcher_;
  MoEExperts experts_;
  // --expert-model-parallel-size > 1: this rank's experts only, tokens exchanged over ctx.ep.
  bool expert_parallel_ = false;
  ExpertExchange exchange_;
  std::vector<int64_t> local_offsets_;
  std::unique_ptr<MLP> shared_;
  MoERouting routing_;
  MoEStats stats_;
  // Gradient scale of the aux and z losses: the batch's weight (1 / micro-batches in training, as
  // Megatron's), so that the step's gradient is that of the mean over micro-batches.
  float aux_loss_scale_ = 1.0f;
};

}  // namespace megadlm
