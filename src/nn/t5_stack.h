#pragma once
// One of T5's two stacks (HuggingFace's T5Stack): pre-norm layers, each a list of residual branches
// y = x + f(rmsnorm(x)):
//   self-attention            prefix.layers.N.input_layernorm           prefix.layers.N.self_attn
//   cross-attention (decoder) prefix.layers.N.pre_cross_attn_layernorm  prefix.layers.N.cross_attn
//   feed-forward              prefix.layers.N.post_attention_layernorm  prefix.layers.N.mlp
// then the stack's final RMSNorm (prefix.norm). The relative position bias of the self-attention is
// one table, prefix.layers.0.self_attn.relative_attention_bias (nn/t5_relative_bias.h: bidirectional in
// the encoder, unidirectional in the decoder), made once per forward and added in every layer; the
// cross-attention has none (as in HF). The decoder's self-attention is causal. The norms are T5's
// scale-only RMSNorm with the config's epsilon. TransformerLayer's branches take a Sublayer that sees
// one input; T5's attention also reads the stack's shared bias and the key masks, hence this stack of
// its own (docs/t5.md). Under tensor parallelism the attention, its bias and the feed-forward hold this
// rank's heads and columns (nn/t5_attention.h, nn/t5_feed_forward.h, nn/t5_relative_bias.h) and every
// rank holds all rows of the residual stream; the norms are whole on every rank.
// Generation runs the decoder one row a step (start_decoding, decode_step): the cross-attention's keys
// and values of the encoder's output made once, the self-attention's kept in a cache that grows by a row
// a step, the bias of the new row against the cached ones (nn/t5_decoder_cache.h).
// Activation recomputation (set_recompute, nn/recompute.h) counts the layers of each stack apart, as
// Megatron's T5 does (its encoder and decoder are two TransformerBlocks): uniform groups of n of this
// stack's layers, or block: this stack's first n. A recomputed group keeps its input (and a copy of its
// output) through the forward; the backward runs its forward again from that input, then its backward.
// Under a precision policy (set_precision) every Linear product follows it; the norms, the bias and
// the attention's scores and softmax stay fp32.
// Legend: B sequences, T rows a sequence, N = B*T, S the encoder's rows a sequence (cross-attention),
// C hidden, Hl this rank's heads (H/tp), R the decoder rows a generation cache has room for.
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "nn/norm.h"
#include "nn/t5_decoder_cache.h"
#include "nn/precision.h"
#include "nn/recompute.h"
#include "nn/t5_attention.h"
#include "nn/t5_feed_forward.h"
#include "nn/t5_relative_bias.h"

namespace megadlm {

struct T5StackOptions {
  int64_t num_layers = 0;
  bool decoder = false;  // causal self-attention, unidirectional buckets, cross-attention
  int64_t num_buckets = 32, max_distance = 128;
  T5FeedForward feed_forward = T5FeedForward::Relu;
};

// The batch as a stack sees it. Host arrays.
struct T5StackInputs {
  int64_t B = 0, T = 0;
  const int32_t* mask = nullptr;         // [B*T] 1 token, 0 padding (a key no query sees), or null
  // The decoder's cross-attention: the encoder's output [B*S, C], its padding [B*S] (or null), and
  // where the backward adds its gradient [B*S, C].
  Tensor memory;
  const int32_t* memory_mask = nullptr;
  int64_t S = 0;
  Tensor* memory_grad = nullptr;
};

class T5Stack {
 public:
  T5Stack() = default;
  T5Stack(ParamStore& store, const ParallelContext& ctx, const std::string& prefix, const TransformerConfig& cfg,
          const T5StackOptions& opt);

  // x [N, C] -> the final norm's output [N, C] (arena); every module saves what its backward needs.
  Tensor forward(Arena& arena, const Tensor& x, const T5StackInputs& in);
  // dy [N, C] -> dx [N, C] written; the cross-attention's gradient of the memory added to
  // in.memory_grad; every parameter's gradient accumulated.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx);

  // Generation, the decoder only, forward only (what the modules save for a backward is overwritten:
  // no backward follows). memory [B*S, C] and its mask [B*S] (or null) -> cache: the memory, every
  // layer's cross-attention keys and values, and room for R decoder rows a sequence (length 0).
  void start_decoding(Arena& arena, const Tensor& memory, const int32_t* memory_mask, int64_t B, int64_t S,
                      int64_t R, T5DecoderCache& cache);
  // x [B, C]: each sequence's decoder row at position cache.length, embedded -> the final norm's output
  // [B, C] (arena); the row's self-attention keys and values join the cache (length + 1).
  Tensor decode_step(Arena& arena, const Tensor& x, T5DecoderCache& cache);
  void set_recompute(const RecomputeConfig& cfg);
  void set_precision(MixedPrecision* p);

 private:
  struct Layer {
    Norm self_norm, cross_norm, ff_norm;
    T5Attention self_attn, cross_attn;
    T5FeedForwardBlock mlp;
  };
  // The stack's geometry of the self- and the cross-attention (after forward set in_, bias_values_).
  T5AttentionGeometry self_geometry() const;
  T5AttentionGeometry cross_geometry() const;
  // Layers [first, last] forward from h [N, C] (not changed) -> the last one's output (arena).
  Tensor forward_layers(Arena& arena, int64_t first, int64_t last, Tensor h);
  // Layer l's backward: g [N, C], the residual stream's gradient, carried from above to below it; f, n
  // [N, C] scratch; the bias table's gradient added to dbias.
  void backward_layer(Arena& arena, size_t l, Tensor& g, Tensor& f, Tensor& n, float* dbias);
  bool decoder_ = false;
  int64_t H_ = 0;
  T5RelativeBias bias_;
  std::vector<Layer> layers_;
  Norm final_norm_;
  // Saved by forward.
  T5StackInputs in_;
  Tensor bias_values_;  // [Hl, T, T]: this rank's heads
  std::vector<int64_t> recompute_start_;  // per layer: first layer of its recomputed group, or -1; empty: none
  std::vector<Tensor> group_inputs_;      // per layer: the kept input of a recomputed group that starts there
};

}  // namespace megadlm
