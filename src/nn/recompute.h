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
#include <string>
#include <vector>

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
// The last layer of the group that starts at layer `first` (starts: recompute_group_starts' answer).
int64_t recompute_group_end(const std::vector<int64_t>& starts, int64_t first);

std::string describe_recompute(const RecomputeConfig& c);

}  // namespace megadlm
