#pragma once
// T5's feed-forward block (HuggingFace's T5DenseActDense / T5DenseGatedActDense), no biases:
//   Relu       (v1.0, "relu"):       y = wo(relu(wi(x)))
//   GatedGelu  (v1.1, "gated-gelu"): y = wo(gelu_tanh(wi_0(x)) * wi_1(x))
// wi, wi_0, wi_1 [C -> F], wo [F -> C]. The GELU is the tanh approximation (HF's "gelu_new"), the
// Backend's gelu; the ReLU and the gate's product are host loops: the T5 family runs on the CPU
// (docs/t5.md). Under a precision policy (set_precision) the three Linear layers' products follow it;
// the activation and the gate stay fp32. Tensor parallelism (Megatron's MLP split): wi, wi_0 and wi_1
// are column-parallel, wo row-parallel; a rank's activation and gate are its F/tp columns, every shape
// with F below reads F/tp.
// Legend: N rows, C hidden, F feed-forward hidden.
#include <cstdint>
#include <string>

#include "core/arena.h"
#include "nn/linear.h"
#include "nn/transformer_config.h"

namespace megadlm {

enum class T5FeedForward : uint8_t { Relu, GatedGelu };

class T5FeedForwardBlock {
 public:
  T5FeedForwardBlock() = default;
  // Registers name.wi.weight, or name.wi_0.weight and name.wi_1.weight; then name.wo.weight.
  T5FeedForwardBlock(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                     const TransformerConfig& cfg, T5FeedForward kind);

  Tensor forward(Arena& arena, const Tensor& x);                // x [N, C] -> y [N, C] (arena)
  void backward(Arena& arena, const Tensor& dy, Tensor& dx);    // dy [N, C] -> dx [N, C] written
  void set_precision(MixedPrecision* p) {                        // nn/precision.h; null = fp32
    for (Linear* l : {&wi_, &wi_1_, &wo_}) l->set_precision(p);
  }

 private:
  T5FeedForward kind_ = T5FeedForward::Relu;
  Linear wi_, wi_1_, wo_;  // wi_ is wi_0 when gated
  Tensor h_, u_, g_;       // saved: wi(x) (gated: wi_0(x)) [N, F]; gated: wi_1(x), gelu(wi_0(x)) [N, F]
};

}  // namespace megadlm
