#pragma once
// One pre-norm decoder layer:  x1 = x + attn(norm1(x));  y = x1 + mlp(norm2(x1)).
// Legend: N = B*T tokens, C hidden.
#include <string>

#include "core/arena.h"
#include "nn/attention.h"
#include "nn/layer_spec.h"
#include "nn/mlp.h"
#include "nn/norm.h"

namespace megadlm {

class TransformerLayer {
 public:
  TransformerLayer(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                   const TransformerConfig& cfg, const LayerSpec& spec);

  Tensor forward(Arena& arena, const Tensor& x, const BatchInfo& batch);  // x [N, C] -> y [N, C]
  // dy [N, C] -> dx [N, C] written; dx must not alias dy.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx);

 private:
  Norm input_norm_, post_attention_norm_;
  SelfAttention attn_;
  MLP mlp_;
};

}  // namespace megadlm
