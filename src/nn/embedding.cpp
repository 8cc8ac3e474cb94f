#include "nn/embedding.h"

#include "kernels/backend.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

int add_word_embeddings(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg) {
  return store.add_balanced_shard("embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size}, 0, ctx.tp.size,
                                  ctx.tp.rank, Init::Normal, cfg.init_method_std, true);
}

Embedding::Embedding(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg,
                     const EmbeddingSpec& spec)
    : store_(&store), ctx_(&ctx), V_(cfg.vocab_size), C_(cfg.hidden_size), P_(cfg.max_position_embeddings),
      Y_(spec.token_types), uses_positions_(cfg.position_embedding != PositionEmbedding::None) {
  MEGADLM_CHECK(spec.token_types >= 0, "the number of token types must not be negative, got ", spec.token_types);
  MEGADLM_CHECK(!spec.patches, "patch embeddings (vision-language models) are not built yet");
  // Vocab-parallel: rank r holds rows balanced_rows(V, tp, r) of the word embeddings (V need not
  // divide by tp: the first V % tp ranks hold one row more).
  MEGADLM_CHECK(V_ >= ctx.tp.size, "the vocabulary size ", V_, " is smaller than --tensor-model-parallel-size ",
                ctx.tp.size, ": every rank needs a row");
  wte_ = add_word_embeddings(store, ctx, cfg);
  vocab_start_ = store.info(wte_).shard_begin;
  V_local_ = store.info(wte_).shape[0];
  if (spec.learned_positions)
    wpe_ = store.add("embed_positions.weight", {P_, C_}, Init::Normal, cfg.init_method_std, true);
  if (Y_ > 0) wtt_ = store.add("embed_token_types.weight", {Y_, C_}, Init::Normal, cfg.init_method_std, true);
  has_norm_ = spec.layernorm;
  if (has_norm_) norm_ = Norm(store, "embed_norm", NormKind::LayerNorm, C_, cfg.norm_epsilon, true, &ctx);
}

void Embedding::check_ids(const int32_t* tokens, const BatchInfo& batch, const int32_t* token_types) const {
  const int64_t N = batch.B * batch.T;
  MEGADLM_CHECK(Y_ == 0 || token_types != nullptr, "the model has a token-type table but no token types were given");
  MEGADLM_CHECK(Y_ > 0 || token_types == nullptr, "token types were given but the model has no token-type table");
  for (int64_t i = 0; Y_ > 0 && i < N; ++i)
    MEGADLM_CHECK(token_types[i] >= 0 && token_types[i] < Y_, "token type ", token_types[i], " at position ", i,
                  " is outside [0, ", Y_, ")");
  // Positions index the learned table or the RoPE tables, both of max_position_embeddings rows.
  MEGADLM_CHECK(!uses_positions_ || batch.positions != nullptr, "the model needs position ids but none were given");
  for (int64_t i = 0; i < N; ++i) {
    MEGADLM_CHECK(tokens[i] >= 0 && tokens[i] < V_, "token id ", tokens[i], " at position ", i,
                  " is outside the vocabulary [0, ", V_, ")");
    if (uses_positions_)
      MEGADLM_CHECK(batch.positions[i] >= 0 && batch.positions[i] < P_, "position id ", batch.positions[i],
                    " is outside [0, ", P_, ") (--max-position-embeddings)");
  }
}

Tensor Embedding::forward(Arena& arena, const int32_t* tokens, const BatchInfo& batch, const int32_t* token_types) {
  const int64_t N = batch.B * batch.T;
  const Backend& be = backend_for(store_->device());
  if (be.device() == Device::CPU) check_ids(tokens, batch, token_types);  // device callers check their host copies
  tokens_ = tokens;
  token_types_ = token_types;
  batch_ = batch;
  arena_ = &arena;
  Tensor x = arena.tensor({N, C_});
  // Tokens outside this rank's vocabulary shard give zero rows; the sum over tp fills them in. The
  // replicated position embeddings are added by tp rank 0 only, so that they count once.
  const bool add_positions = wpe_ >= 0 && ctx_->tp.rank == 0;
  be.embedding_forward(x.data<float>(), tokens, store_->value(wte_).data<float>(), vocab_start_, V_local_,
                         add_positions ? batch.positions : nullptr,
                         add_positions ? store_->value(wpe_).data<float>() : nullptr, N, C_);
  // The token-type rows, replicated like the position table: added by tp rank 0 only. A lookup in the
  // table as if it were a vocabulary of Y ids, then added.
  if (wtt_ >= 0 && ctx_->tp.rank == 0) {
    Tensor types = arena.tensor({N, C_});
    be.embedding_forward(types.data<float>(), token_types, store_->value(wtt_).data<float>(), 0, Y_, nullptr,
                         nullptr, N, C_);
    be.add_inplace(x.data<float>(), types.data<float>(), N * C_);
  }
  x = reduce_rows(arena, *ctx_, x);  // all-reduce, or this rank's rows under sequence parallelism
  return has_norm_ ? norm_.forward(arena, x) : x;
}

void Embedding::backward(const Tensor& dy_local) {
  const int64_t N = batch_.B * batch_.T;
  // Through the LayerNorm first: the gradient of the sum (this rank's rows under sequence parallelism).
  Tensor dsum;
  if (has_norm_) {
    dsum = arena_->tensor(dy_local.shape());
    norm_.backward(dy_local, dsum);
  }
  const Tensor& dx_local = has_norm_ ? dsum : dy_local;
  // Every rank needs the gradient of all rows (gathered under sequence parallelism): its word
  // embedding shard takes the rows of its tokens, and the replicated position embeddings get the
  // same gradient on every rank.
  const Tensor dx = gather_rows_scratch(*ctx_, dx_local, 0);
  const Backend& be = backend_of(dx);
  // Rows are added to, never written whole; a tied output layer later in the step must add to them too.
  store_->mark_grad_written(wte_);
  be.embedding_backward(store_->grad(wte_).data<float>(), wpe_ >= 0 ? store_->grad(wpe_).data<float>() : nullptr,
                          dx.data<float>(), tokens_, vocab_start_, V_local_, wpe_ >= 0 ? batch_.positions : nullptr, N,
                          C_);
  // The token-type table is replicated: every rank adds the gradient of all rows, as for the positions.
  if (wtt_ >= 0)
    be.embedding_backward(store_->grad(wtt_).data<float>(), nullptr, dx.data<float>(), token_types_, 0, Y_, nullptr,
                          N, C_);
}

}  // namespace megadlm
