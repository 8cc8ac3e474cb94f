#pragma once
// The feed-forward block: fc1 (column-parallel) -> GELU or SwiGLU -> fc2 (row-parallel).
// With SwiGLU, fc1 is Megatron's fused [gate; up] projection of 2F outputs.
// Legend: N tokens, C hidden, F ffn hidden.
#include <string>

#include "core/arena.h"
#include "nn/linear.h"
#include "nn/transformer_config.h"

namespace megadlm {

class MLP {
 public:
  MLP() = default;
  MLP(ParamStore& store, const ParallelContext& ctx, const std::string& name, const TransformerConfig& cfg,
      int64_t ffn_hidden, float output_init_std);

  Tensor forward(Arena& arena, const Tensor& x);                // x [N, C] -> [N, C]
  void backward(Arena& arena, const Tensor& dy, Tensor& dx);    // dx [N, C] written

 private:
  Activation act_ = Activation::Gelu;
  int64_t F_ = 0;
  Linear fc1_, fc2_;
  Tensor h_;  // fc1 output [N, F] or [N, 2F]
};

}  // namespace megadlm
