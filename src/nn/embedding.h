#pragma once
// Token embedding, vocab-parallel: each tensor-parallel rank holds its balanced_rows(V, tp, rank) rows
// (core/parameters.h: V/tp, one more on the first V % tp ranks), tokens outside its shard
// give zero rows and the output is summed over tp (reduce-scattered to this rank's rows under
// sequence parallelism). For GPT-2 style models, learned absolute position embeddings (replicated).
// For BERT, a token-type table (embed_token_types.weight [Y, C], replicated, added like the positions)
// and a LayerNorm of the sum (embed_norm; on this rank's rows under sequence parallelism).
// Legend: N tokens, C hidden, V vocabulary, P positions, Y token types.
#include <string>

#include "core/arena.h"
#include "core/parameters.h"
#include "nn/module_specs.h"
#include "nn/norm.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// Registers this tp rank's shard [V/tp, C] of the word embeddings, embed_tokens.weight, and gives its
// id. Embedding's own table, and the last pipeline stage's copy for a tied output layer (Megatron's
// word_embeddings_for_head): the same name, hence the same name-keyed init, kept equal by summing the
// two copies' gradients over the embedding group.
int add_word_embeddings(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg);

class Embedding {
 public:
  Embedding() = default;
  // Sizes from cfg; which tables from the spec (patches: refused, not built yet).
  Embedding(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg, const EmbeddingSpec& spec);

  // tokens [N] -> x [N, C] (all tokens on every tp rank; x has this rank's N/tp rows under sequence
  // parallelism). Token ids must be in [0, V) and positions in [0, P): checked, with an
  // Error naming the first bad id.
  // tokens [N] and batch.positions on the parameters' device. On the CPU the ids are checked here;
  // a device caller checks its host copies with check_ids before uploading them.
  // token_types [N] (a model with a token-type table needs them, ids in [0, Y)), else null.
  Tensor forward(Arena& arena, const int32_t* tokens, const BatchInfo& batch, const int32_t* token_types = nullptr);
  // Throws Error naming the first token id outside the vocabulary, position id outside the table or
  // token type outside [0, Y) (host arrays).
  void check_ids(const int32_t* tokens, const BatchInfo& batch, const int32_t* token_types = nullptr) const;
  // Accumulates into the embedding gradients. With the LayerNorm its temporaries come from the arena
  // the forward used (still holding the forward's activations).
  void backward(const Tensor& dx);

  int word_embeddings_id() const { return wte_; }
  int token_types() const { return static_cast<int>(Y_); }

 private:
  ParamStore* store_ = nullptr;
  const ParallelContext* ctx_ = nullptr;
  int64_t V_ = 0, C_ = 0, P_ = 0, Y_ = 0;
  int64_t vocab_start_ = 0, V_local_ = 0;  // this rank's shard of the vocabulary
  bool uses_positions_ = false;
  int wte_ = -1, wpe_ = -1, wtt_ = -1;
  bool has_norm_ = false;
  Norm norm_;
  Arena* arena_ = nullptr;  // the forward's, for the backward's temporaries
  const int32_t* tokens_ = nullptr;
  const int32_t* token_types_ = nullptr;
  BatchInfo batch_;
};

}  // namespace megadlm
