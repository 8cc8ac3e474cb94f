#include "train/activation_memory.h"

#include <algorithm>
#include <vector>

#include "nn/lm_head.h"
#include "nn/moe/moe_counts.h"

namespace megadlm {

namespace {

// Sizes per token, in elements, of the tensors one layer makes.
struct LayerDims {
  double C, H, K, D, F, fc1, V, stats;
  bool qk_norm;
};

LayerDims dims(const TransformerConfig& c) {
  LayerDims d;
  d.C = static_cast<double>(c.hidden_size);
  d.H = static_cast<double>(c.num_attention_heads);
  d.K = static_cast<double>(c.num_query_groups);
  d.D = static_cast<double>(c.kv_channels);
  d.F = static_cast<double>(c.ffn_hidden_size);
  d.fc1 = c.activation == Activation::SwiGLU ? 2 * d.F : d.F;
  d.V = static_cast<double>(c.vocab_size);
  d.stats = c.normalization == NormKind::LayerNorm ? 2 : 1;  // mean and rstd, or rstd
  d.qk_norm = c.qk_layernorm;
  return d;
}

// Bytes per element of a Linear's saved input copy (0: fp32 keeps a view of its input).
double saved_input_bytes(const PrecisionConfig& p) {
  switch (p.mode) {
    case PrecisionMode::BF16:
    case PrecisionMode::FP16: return 2;
    case PrecisionMode::FP8: return 1;
    default: return 0;
  }
}

// Bytes per element of the narrow activations (q, k, v, attention output, MLP hidden): bf16 or fp16.
constexpr double kNarrow = 2;

// Bytes per token a layer leaves in the arena after its forward.
double layer_saved(const LayerDims& d, const TransformerConfig& c, int64_t layer, const PrecisionConfig& p) {
  const double e = saved_input_bytes(p);
  const bool lowp = p.mode != PrecisionMode::FP32;
  const bool moe = c.moe.is_moe_layer(layer);
  double b = 4 * d.stats + (lowp ? 0 : 4 * d.C);                   // input norm (low precision: y is transient)
  b += e * d.C;                                                    // q/k/v's shared input copy
  if (d.qk_norm) b += 4 * (d.H + d.K) + 4 * (d.H + d.K) * d.D;     // rstd, raw q, k (fp32) or normed q, k
  b += (lowp ? kNarrow : 4) * ((d.H + 2 * d.K) * d.D + d.H * d.D); // q, k, v, attention output
  b += 4 * d.H;                                                    // log-sum-exp
  if (p.mode == PrecisionMode::FP8) b += e * d.H * d.D;            // o_proj's own input copy (else shared)
  b += 4 * d.C;                                                    // o_proj output (the residual)
  b += 4 * d.stats + (lowp && !moe ? 0 : 4 * d.C);                 // post-attention norm
  if (moe) return b + 4 * ffn_counts(c, layer).saved_per_token;
  const bool remade = remakes_mlp_activation(p);
  if (lowp) b += e * d.C + kNarrow * d.fc1 + (remade ? 0 : e * d.F) + 4 * d.C;  // fc1 input, narrow h, fc2 input, out
  else b += 4 * (d.fc1 + d.F + d.C);                               // h, activation, output
  return b;
}

// Bytes per token of one layer's backward temporaries at their peak.
double layer_backward_temps(const LayerDims& d, bool lowp, bool bf16_attention, bool ring) {
  double mlp = 4 * (d.F + d.fc1);                                 // da, dh (also h back in fp32)
  if (lowp) mlp += kNarrow * d.F;                                 // fc2's input remade (bf16 products, fp16)
  double attn = 4 * (2 * d.H * d.D + 2 * d.K * d.D);              // d_attn, dq, dk, dv
  // The ring attention's backward (nn/ring_attention.cpp): keys, values and their gradients twice
  // (current and incoming), the query-side chunk copies (q, dout, out, dq, a partial dq, lse) and the
  // key-side ones (k, v, dk, dv and their partials).
  if (ring) attn += 4 * (8 * d.K * d.D + 4.5 * d.H * d.D + d.H + 3 * d.K * d.D);
  if (lowp && !bf16_attention) attn += 4 * (2 * d.H * d.D + 2 * d.K * d.D);  // q, k, v, output back in fp32
  if (d.qk_norm) attn += 4 * (d.H + d.K) * d.D;                   // dq_raw, dk_raw
  return 4 * 2 * d.C + std::max(mlp, attn);                       // tmp, dx1 + the larger block
}

// Bytes per token of one layer's forward values in the transient arena (low precision only).
double layer_forward_transient(const LayerDims& d) {
  double attn = 4 * d.C + 4 * (d.H + 2 * d.K) * d.D + 4 * d.H * d.D;  // norm output, q, k, v, output
  if (d.qk_norm) attn += 4 * (d.H + d.K) * d.D;                        // normed q, k
  const double mlp = 4 * d.C + 4 * (d.fc1 + d.F);                      // norm output, h, activation
  return std::max(attn, mlp);
}

}  // namespace

double activation_peak_bytes(const TransformerConfig& c, int64_t micro_batch, int64_t T, const MemoryOptions& o) {
  const LayerDims d = dims(c);
  const int64_t L = c.num_layers;
  const std::vector<int64_t> start = recompute_group_starts(o.recompute, L);
  double kept = 4 * d.C;  // embedding output
  double largest_group = 0, group = 0;
  const bool lowp = o.precision.mode != PrecisionMode::FP32;
  // Backward temporaries: in the arena (fp32), or with the forward's values in the transient arena.
  double temps = 0;
  for (int64_t l = 0; l < L; ++l) {
    const double s = layer_saved(d, c, l, o.precision);
    temps = std::max(temps, layer_backward_temps(d, lowp, bf16_products_on(o.precision) && o.context_parallel == 1,
                                                 o.context_parallel > 1));
    if (lowp) temps = std::max(temps, layer_forward_transient(d));
    const int64_t g = start[static_cast<size_t>(l)];
    if (g < 0) {
      kept += s;
      continue;
    }
    if (g == l) {
      kept += 4 * d.C;  // the group's output copy (its input is the previous output, kept already)
      group = 0;
    }
    group += s;
    largest_group = std::max(largest_group, group);
  }
  // Final norm, the two gradient buffers, one chunk of logits (and their gradient, in place),
  // per-token losses.
  const double N = static_cast<double>(micro_batch) * static_cast<double>(T);
  const bool bf16_gemm = bf16_products_on(o.precision);
  // (The CPU's chunk: under bf16 products bf16 logits with dlogits in place, nn/lm_head.h.)
  const int logit_bytes = bf16_gemm ? 2 : 4;
  const double chunk = static_cast<double>(logits_chunk_rows(micro_batch * T, c.vocab_size, logit_bytes)) / N;
  const double head = 4 * (d.C + d.stats) + 4 * 2 * d.C;
  // The output layer's temporaries are freed before the layers' backward makes its own: the larger
  // of the two counts (in the arena in fp32, in the transient arena under a precision policy).
  // Under bf16 products: + the bf16 x and the logits' fp32 slab scratch.
  const double head_temps = logit_bytes * d.V * chunk + 4 +
                            (bf16_gemm ? 2 * d.C + 4.0 * static_cast<double>(logits_slab_cols(c.vocab_size)) * chunk : 0);
  return N * (kept + head + largest_group + std::max(temps, head_temps));
}

double precision_buffer_bytes(const TransformerConfig& c, int64_t micro_batch, int64_t T, const MemoryOptions& o) {
  const PrecisionConfig& p = o.precision;
  if (p.mode == PrecisionMode::FP32) return 0;
  const LayerDims d = dims(c);
  const double N = static_cast<double>(micro_batch) * static_cast<double>(T);
  const double in_max = std::max({d.C, d.H * d.D, d.F}), out_max = std::max({d.C, d.H * d.D, d.fc1});
  // Weight matrices of the dense layers' Linear products (MoE experts stay fp32).
  double matrices = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    matrices += d.C * (d.H + 2 * d.K) * d.D + d.H * d.D * d.C;
    if (!c.moe.is_moe_layer(l)) matrices += d.C * d.fc1 + d.F * d.C;
  }
  const bool bf16_gemm = bf16_products_on(p);
  const bool storage_only = p.mode == PrecisionMode::BF16 && !p.bf16_products;
  double b = 0;
  if (bf16_gemm) {
    b += 2 * (matrices + d.V * d.C) + 2 * N * out_max;  // bf16 weights (and the output layer's), bf16 dy
  } else if (storage_only) {
    b += 4 * N * in_max;  // the saved input back in fp32
  } else {
    b += 4 * matrices + 4 * N * (in_max + out_max);  // rounded weights, input and gradient in fp32
    if (p.mode == PrecisionMode::FP16) b += 2 * N * out_max;
  }
  return b;
}

}  // namespace megadlm
