#include "nn/embedding.h"

#include "kernels/cpu/embedding.h"

namespace megadlm {

Embedding::Embedding(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg)
    : store_(&store), ctx_(&ctx), V_(cfg.vocab_size), C_(cfg.hidden_size), P_(cfg.max_position_embeddings),
      uses_positions_(cfg.position_embedding != PositionEmbedding::None) {
  MDLM_CHECK(ctx.tp.size == 1, "vocab-parallel embedding: tensor parallelism is not available in this build yet");
  wte_ = store.add("embed_tokens.weight", {V_, C_}, Init::Normal, cfg.init_method_std, true);
  if (cfg.position_embedding == PositionEmbedding::LearnedAbsolute)
    wpe_ = store.add("embed_positions.weight", {P_, C_}, Init::Normal, cfg.init_method_std, true);
}

Tensor Embedding::forward(Arena& arena, const int32_t* tokens, const BatchInfo& batch) {
  const int64_t N = batch.B * batch.T;
  // Positions index the learned table or the RoPE tables, both of max_position_embeddings rows.
  MDLM_CHECK(!uses_positions_ || batch.positions != nullptr, "the model needs position ids but none were given");
  for (int64_t i = 0; i < N; ++i) {
    MDLM_CHECK(tokens[i] >= 0 && tokens[i] < V_, "token id ", tokens[i], " at position ", i,
               " is outside the vocabulary [0, ", V_, ")");
    if (uses_positions_)
      MDLM_CHECK(batch.positions[i] >= 0 && batch.positions[i] < P_, "position id ", batch.positions[i],
                 " is outside [0, ", P_, ") (--max-position-embeddings)");
  }
  tokens_ = tokens;
  batch_ = batch;
  Tensor x = arena.tensor({N, C_});
  cpu::embedding_forward(x.data<float>(), tokens, store_->value(wte_).data<float>(), 0, V_,
                         wpe_ >= 0 ? batch.positions : nullptr,
                         wpe_ >= 0 ? store_->value(wpe_).data<float>() : nullptr, N, C_);
  return x;
}

void Embedding::backward(const Tensor& dx) {
  const int64_t N = batch_.B * batch_.T;
  cpu::embedding_backward(store_->grad(wte_).data<float>(), wpe_ >= 0 ? store_->grad(wpe_).data<float>() : nullptr,
                          dx.data<float>(), tokens_, 0, V_, wpe_ >= 0 ? batch_.positions : nullptr, N, C_);
}

}  // namespace megadlm
