#include "nn/moe/moe_layer.h"

#include "kernels/backend.h"

namespace megadlm {

MoELayer::MoELayer(ParamStore& store, const ParallelContext& ctx, const std::string& name, const TransformerConfig& cfg,
                   Activation activation, float output_init_std)
    : name_(name), cfg_(cfg.moe), C_(cfg.hidden_size) {
  // The router's statistics need all of the rows of the batch, which sequence parallelism splits.
  MEGADLM_CHECK(!(ctx.sequence_parallel && ctx.tp.size > 1), name,
                ": --sequence-parallel is not supported with MoE layers (--num-experts)");
  const int64_t F = cfg_.ffn_hidden_size > 0 ? cfg_.ffn_hidden_size : cfg.ffn_hidden_size;
  router_ = MoERouter(store, name + ".router", cfg_, C_, cfg.init_method_std);
  router_.set_context_parallel(ctx.cp);
  expert_parallel_ = ctx.ep.size > 1;
  if (expert_parallel_) {
    exchange_ = ExpertExchange(ctx, cfg_.num_experts, C_);
    experts_ = MoEExperts(store, name + ".experts", cfg, activation, exchange_.local_experts(), F, output_init_std,
                          cfg_.grouped_gemm, exchange_.first_expert());
  } else {
    experts_ = MoEExperts(store, name + ".experts", cfg, activation, cfg_.num_experts, F, output_init_std,
                          cfg_.grouped_gemm);
  }
  if (cfg_.shared_expert_size > 0)
    shared_ = std::make_unique<MLP>(store, ctx, name + ".shared_experts", cfg, activation, cfg_.shared_expert_size,
                                    output_init_std);
  stats_.tokens_per_expert.assign(static_cast<size_t>(cfg_.num_experts), 0.0);
}

Tensor MoELayer::forward(Arena& arena, const Tensor& x, const BatchInfo& batch) {
  aux_loss_scale_ = batch.weight;
  const int64_t N = x.numel() / C_;
  const int64_t B = batch.B > 0 && batch.T > 0 && batch.B * batch.T == N ? batch.B : 1;
  router_.forward(arena, x, B, N / B, routing_);
  Tensor xp = dispatcher_.dispatch(arena, x, routing_);
  Tensor out;
  if (expert_parallel_) {
    Tensor xl = exchange_.send_to_experts(arena, xp, routing_.offsets, local_offsets_);
    out = exchange_.return_from_experts(arena, experts_.forward(arena, xl, local_offsets_));
  } else {
    out = experts_.forward(arena, xp, routing_.offsets);
  }
  Tensor y = dispatcher_.combine(arena, out, routing_);
  if (shared_) {
    Tensor s = shared_->forward(arena, x);
    backend_of(y).add_inplace(y.data<float>(), s.data<float>(), y.numel());
  }
  return y;
}

void MoELayer::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  const size_t mark = arena.mark();
  const int64_t P = routing_.rows();
  if (shared_) shared_->backward(arena, dy, dx);  // writes dx
  Tensor dout = arena.tensor({P, C_});
  Tensor dweight = arena.tensor({P});
  dispatcher_.combine_backward(dy, routing_, dout, dweight.data<float>());
  Tensor dxp = arena.tensor({P, C_});
  if (expert_parallel_) {
    Tensor doutl = exchange_.gradients_to_experts(arena, dout);
    Tensor dxl = arena.tensor(doutl.shape());
    experts_.backward(arena, doutl, dxl);
    exchange_.gradients_from_experts(arena, dxl, dxp);
  } else {
    experts_.backward(arena, dout, dxp);
  }
  dispatcher_.dispatch_backward(arena, dxp, routing_, dx, /*accumulate=*/shared_ != nullptr);
  router_.backward(arena, routing_, dweight.data<float>(), aux_loss_scale_, dx);  // accumulates into dx
  arena.release(mark);

  for (int64_t e = 0; e < cfg_.num_experts; ++e) stats_.tokens_per_expert[e] += static_cast<double>(routing_.tokens_per_expert[e]);
  stats_.assignments += static_cast<double>(routing_.assignments);
  stats_.dropped += static_cast<double>(routing_.dropped);
  stats_.aux_loss += routing_.aux_loss;
  stats_.z_loss += routing_.z_loss;
  ++stats_.micro_batches;
}

MoEStats MoELayer::take_stats() {
  MoEStats s = stats_;
  stats_ = MoEStats();
  stats_.tokens_per_expert.assign(static_cast<size_t>(cfg_.num_experts), 0.0);
  return s;
}

}  // namespace megadlm
