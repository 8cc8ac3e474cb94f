#include "nn/attention_projections.h"

#include "core/error.h"

namespace megadlm {

AttentionProjections make_attention_projections(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                                                const TransformerConfig& cfg, float output_init_std) {
  const int64_t C = cfg.hidden_size, H = cfg.num_attention_heads, K = cfg.num_query_groups, D = cfg.kv_channels;
  const int tp = ctx.tp.size;
  MEGADLM_CHECK(H % tp == 0 && K % tp == 0, name, ": --num-attention-heads ", H, " and --num-query-groups ", K,
                " must both be divisible by --tensor-model-parallel-size ", tp);
  const bool qkv_bias = cfg.add_bias_linear || cfg.add_qkv_bias;
  AttentionProjections p;
  p.q = Linear(store, ctx, name + ".q_proj", C, H * D, qkv_bias, cfg.init_method_std);
  p.k = Linear(store, ctx, name + ".k_proj", C, K * D, qkv_bias, cfg.init_method_std);
  p.v = Linear(store, ctx, name + ".v_proj", C, K * D, qkv_bias, cfg.init_method_std);
  p.o = Linear(store, ctx, name + ".o_proj", H * D, C, cfg.add_bias_linear, output_init_std, LinearParallel::Row);
  for (Linear* l : {&p.q, &p.k, &p.v}) l->set_input_mapped_by_caller();
  p.H = H / tp;
  p.K = K / tp;
  return p;
}

}  // namespace megadlm
