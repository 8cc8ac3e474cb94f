#pragma once
// Self-attention: q/k/v projections (column-parallel), optional per-head QK RMSNorm, RoPE, the
// memory-efficient attention kernel (causal, bidirectional or block-causal, per-document), output
// projection (row-parallel). Grouped-query attention when K < H.
// Tensor parallelism: each rank computes H/tp heads and their K/tp KV groups (QK-norm and RoPE per
// local head; the QK-norm weights' gradients are summed over tp). Under sequence parallelism x and y
// hold this rank's N/tp rows: x is all-gathered once for q, k, v, and dx reduce-scattered back.
// Context parallelism: the rows are this rank's two chunks of each sequence and the attention itself
// is the ring over the cp group (nn/ring_attention.h), in fp32 whatever the precision policy.
// Legend: N = B*T tokens, C hidden, H heads, K kv heads, D head dim.
#include <string>

#include "core/arena.h"
#include "nn/module_specs.h"
#include "nn/attention_projections.h"
#include "nn/linear.h"
#include "nn/ring_attention.h"
#include "nn/sublayer.h"

namespace megadlm {

class SelfAttention : public Sublayer {
 public:
  SelfAttention() = default;
  // Sizes from cfg (heads, groups, head dim, biases, RoPE); the mask and QK-norm from the spec.
  SelfAttention(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                const TransformerConfig& cfg, const SelfAttentionSpec& spec, float output_init_std);

  // x [N, C] -> y [N, C]
  Tensor forward(Arena& arena, const Tensor& x, const BatchInfo& batch) override;
  // dy [N, C] -> dx [N, C] written. Temporaries come from the arena.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx) override;
  // Inference only (nothing saved for a backward): x [B*Tn, C] are new rows; their keys and values
  // are written to rows offsets[b] .. offsets[b]+Tn of the cache's k, v [B, S, K*D], and their queries
  // attend to the cache (Backend::decode_attention_forward: causal or full). -> y [B*Tn, C].
  Tensor forward_cached(Arena& arena, const Tensor& x, const BatchInfo& batch, const CacheRows& cache) override;
  // The precision policy of the four projections (nn/precision.h). Under a policy, q, k, v and the
  // attention output are also kept in its narrow activation format (bf16, fp16 under --fp16) for the
  // backward, which loads them back in fp32; the forward runs on the fp32 values.
  void set_precision(MixedPrecision* p) override;

 private:
  AttentionMask mask() const;
  // The attention of q, k, v into out and lse_ (allocated by the caller): the backend's kernel, or
  // the ring over the context-parallel group (nn/ring_attention.h) when cp > 1.
  void attend(Arena& arena, float* out, const float* q, const float* k, const float* v);
  RingAttentionArgs ring_args() const;
  Tensor forward_low_precision(Arena& arena, const Tensor& x_local);
  // q, k (raw projections) -> QK-norm (when configured) and RoPE, in place or into `work` tensors.
  void normalize_and_rotate(Arena& arena, Arena& work, Tensor& q, Tensor& k);
  MixedPrecision* prec_ = nullptr;  // null: fp32
  ParamStore* store_ = nullptr;
  const ParallelContext* ctx_ = nullptr;
  TransformerConfig cfg_;
  SelfAttentionSpec spec_;
  int64_t H_ = 0, K_ = 0, D_ = 0;  // this rank's heads and KV groups (H/tp, K/tp), head dim
  AttentionProjections proj_;  // q, k, v, o
  int q_norm_ = -1, k_norm_ = -1;  // per-head RMSNorm weights [D]
  Tensor rope_cos_, rope_sin_;     // [P, D/2]
  // Saved by forward.
  BatchInfo batch_;
  Tensor q_raw_, k_raw_;           // projections before QK-norm (only with QK-norm)
  Tensor q_rstd_, k_rstd_;
  Tensor q_, k_, v_;               // inputs of the attention kernel (fp32, or narrow under a policy)
  Tensor attn_out_, lse_;          // attention output (same dtype as q_), log-sum-exp [B, H, T]
  bool bf16_attention_ = false;    // the forward ran the bf16 kernel (bf16 products), so does the backward
};

}  // namespace megadlm
