#pragma once
// The four projections of an attention block, named as HuggingFace LLaMA names them: q_proj, k_proj and
// v_proj column-parallel, their input mapped by the caller (one gather of the input and one reduction of
// the summed input gradients for the three), o_proj row-parallel. Tensor parallelism gives each rank
// H/tp heads and the K/tp KV groups they read (the heads of a group are contiguous, so rank r's heads
// use exactly groups [r*K/tp, (r+1)*K/tp)).
// Legend: C hidden, H heads, K kv heads, D head dim.
#include <string>

#include "nn/linear.h"
#include "nn/transformer_config.h"

namespace megadlm {

struct AttentionProjections {
  Linear q, k, v, o;     // [C -> H*D], [C -> K*D] twice, [H*D -> C] (full sizes)
  int64_t H = 0, K = 0;  // this rank's heads and KV groups
};

// Registers q, k, v, o in that order under `name`; an Error naming both flags when the heads or the
// groups do not divide over the tensor-parallel ranks.
AttentionProjections make_attention_projections(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                                                const TransformerConfig& cfg, float output_init_std);

}  // namespace megadlm
