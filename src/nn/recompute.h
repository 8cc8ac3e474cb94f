#pragma once
// Activation recomputation (Megatron's --recompute-granularity / --recompute-method /
// --recompute-num-layers).
//
//   full       only the input of each recomputed group of layers is kept through the forward; the
//              backward runs the group's forward again (same kernels, same values) and then its
//              backward. method uniform: every layer, in groups of num_layers consecutive layers;
//              method block: only the first num_layers layers, each on its own.
//   selective  Megatron recomputes the attention core (scores, softmax, dropout). The attention
//              kernels (Backend::attention_forward / _backward) never store the [T, T] scores or
//              probabilities: their backward recomputes them from q, k and the log-sum-exp, so
//              selective recomputation is what it always does, and the flag changes nothing else.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"

namespace megadlm {

enum class RecomputeGranularity : uint8_t { None, Full, Selective };
enum class RecomputeMethod : uint8_t { Uniform, Block };

struct RecomputeConfig {
  RecomputeGranularity granularity = RecomputeGranularity::None;
  RecomputeMethod method = RecomputeMethod::Uniform;
  int64_t num_layers = 1;
};

RecomputeGranularity recompute_granularity_from_name(const std::string& name);  // "" | full | selective
RecomputeMethod recompute_method_from_name(const std::string& name);            // uniform | block

// For each of L layers: the index of the first layer of its recomputed group, or -1 when the layer
// keeps its activations. Groups are runs of consecutive layers with the same first layer.
std::vector<int64_t> recompute_group_starts(const RecomputeConfig& c, int64_t L);
// The same, or empty when no layer is recomputed (what a stack keeps: nothing to look up per layer).
std::vector<int64_t> recomputed_group_starts(const RecomputeConfig& c, int64_t L);

std::string describe_recompute(const RecomputeConfig& c);

// A stack of L layers under a plan (TransformerBlock, T5Stack). run(first, last, x): layers [first, last]
// forward from x (which they read without changing) -> the last one's output, in the arena.
using RunLayers = std::function<Tensor(int64_t first, int64_t last, Tensor x)>;
// The forward from x: a layer outside every group runs as it is; a recomputed group keeps its input
// (group_inputs[first], resized to L) and a copy of its output made below the arena's mark, and frees
// what else it made. starts: recompute_group_starts' answer, empty for none.
Tensor forward_with_recompute(Arena& arena, const std::vector<int64_t>& starts, int64_t L, Tensor x,
                              std::vector<Tensor>& group_inputs, const RunLayers& run);
// The backward from the last layer down, backward(l) layer l's: a recomputed group's forward runs again
// from its kept input first (the same kernels on the same values give the same activations), then its
// layers' backward, then both are freed.
void backward_with_recompute(Arena& arena, const std::vector<int64_t>& starts, int64_t L,
                             const std::vector<Tensor>& group_inputs, const RunLayers& run,
                             const std::function<void(int64_t l)>& backward);

}  // namespace megadlm
