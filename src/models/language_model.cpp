#include "models/language_model.h"

#include <algorithm>

#include "kernels/cpu/cross_entropy.h"
#include "nn/moe_counts.h"

namespace megadlm {

void validate_config(const TransformerConfig& c) {
  MDLM_CHECK(c.num_layers >= 1, "--num-layers must be at least 1, got ", c.num_layers);
  MDLM_CHECK(c.hidden_size >= 1, "--hidden-size must be positive, got ", c.hidden_size);
  MDLM_CHECK(c.num_attention_heads >= 1, "--num-attention-heads must be positive, got ", c.num_attention_heads);
  MDLM_CHECK(c.num_query_groups >= 1 && c.num_attention_heads % c.num_query_groups == 0,
             "--num-query-groups ", c.num_query_groups, " does not divide --num-attention-heads ",
             c.num_attention_heads);
  MDLM_CHECK(c.kv_channels >= 1, "--kv-channels must be positive, got ", c.kv_channels);
  MDLM_CHECK(c.position_embedding != PositionEmbedding::Rope || c.kv_channels % 2 == 0,
             "RoPE needs an even head dimension (--kv-channels), got ", c.kv_channels);
  MDLM_CHECK(c.ffn_hidden_size >= 1, "--ffn-hidden-size must be positive, got ", c.ffn_hidden_size);
  MDLM_CHECK(c.vocab_size >= 2, "vocabulary size must be at least 2, got ", c.vocab_size);
  MDLM_CHECK(c.max_position_embeddings >= 1, "--max-position-embeddings must be positive");
  MDLM_CHECK(c.norm_epsilon > 0, "--norm-epsilon must be positive, got ", c.norm_epsilon);
}

int64_t parameter_count(const TransformerConfig& c) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, K = c.num_query_groups, D = c.kv_channels;
  const bool bias = c.add_bias_linear;
  const int64_t norm = c.normalization == NormKind::LayerNorm ? 2 * C : C;
  int64_t per_layer = 2 * norm;
  per_layer += C * (H + 2 * K) * D + ((bias || c.add_qkv_bias) ? (H + 2 * K) * D : 0);
  per_layer += H * D * C + (bias ? C : 0);
  if (c.qk_layernorm) per_layer += 2 * D;
  int64_t total = c.num_layers * per_layer + norm + c.vocab_size * C;
  for (int64_t l = 0; l < c.num_layers; ++l) total += ffn_counts(c, l).params;  // dense MLP or MoE block
  if (c.position_embedding == PositionEmbedding::LearnedAbsolute) total += c.max_position_embeddings * C;
  if (c.untie_embeddings_and_output_weights) total += c.vocab_size * C;
  return total;
}

LanguageModel::LanguageModel(const TransformerConfig& cfg, const LayerSpec& spec, const ParallelContext& ctx,
                             bool pre_process, bool post_process)
    : cfg_(cfg), ctx_(ctx), pre_process_(pre_process), post_process_(post_process) {
  validate_config(cfg);
  MDLM_CHECK(pre_process && post_process, "pipeline stages are not available in this build yet");
  embedding_ = Embedding(params_, ctx_, cfg_);
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    LayerSpec layer_spec = spec;
    if (cfg.moe.is_moe_layer(l)) layer_spec.mlp = MlpKind::MoE;  // --num-experts with --moe-layer-freq
    layers_.push_back(
        std::make_unique<TransformerLayer>(params_, ctx_, "layers." + std::to_string(l), cfg_, layer_spec));
  }
  final_norm_ = Norm(params_, "norm", cfg.normalization, cfg.hidden_size, cfg.norm_epsilon,
                     cfg.normalization == NormKind::LayerNorm);
  head_ = LMHead(params_, cfg_, cfg.untie_embeddings_and_output_weights ? -1 : embedding_.word_embeddings_id());
  params_.finalize();
}

Tensor LanguageModel::forward_hidden(const MicroBatch& mb) {
  const BatchInfo info = mb.info();
  Tensor x = embedding_.forward(arena_, mb.tokens, info);
  for (auto& layer : layers_) x = layer->forward(arena_, x, info);
  return final_norm_.forward(arena_, x);
}

double LanguageModel::forward_backward(const MicroBatch& mb, float grad_scale, float* per_token_loss) {
  Tensor h = forward_hidden(mb);
  const Shape shape = h.shape();
  // Two gradient buffers, ping-ponged down the layers, so the backward's memory is O(N*C) on top of
  // the saved activations.
  Tensor g0 = arena_.tensor(shape), g1 = arena_.tensor(shape);
  const double loss = head_.loss_and_backward(arena_, h, mb.targets, mb.weights, grad_scale, g0, per_token_loss);
  final_norm_.backward(g0, g1);
  Tensor* dy = &g1;
  Tensor* dx = &g0;
  for (int64_t l = static_cast<int64_t>(layers_.size()) - 1; l >= 0; --l) {
    layers_[l]->backward(arena_, *dy, *dx);
    std::swap(dy, dx);
  }
  embedding_.backward(*dy);
  arena_.reset();
  return loss;
}

double LanguageModel::forward_loss(const MicroBatch& mb, float* per_token_loss) {
  Tensor h = forward_hidden(mb);
  Tensor lg = head_.logits(arena_, h);
  const int64_t N = mb.B * mb.T;
  Tensor losses = arena_.tensor({N});
  const double loss = cpu::cross_entropy_forward_backward(losses.data<float>(), nullptr, lg.data<float>(),
                                                          mb.targets, mb.weights, -100, 1.0f, N, cfg_.vocab_size);
  if (per_token_loss) std::copy(losses.data<float>(), losses.data<float>() + N, per_token_loss);
  arena_.reset();
  return loss;
}

std::vector<MoELayer*> LanguageModel::moe_layers() {
  std::vector<MoELayer*> out;
  for (auto& layer : layers_)
    if (layer->moe()) out.push_back(layer->moe());
  return out;
}

Tensor LanguageModel::forward_logits(const MicroBatch& mb) {
  Tensor h = forward_hidden(mb);
  return head_.logits(arena_, h);
}

void LanguageModel::allocate_cache(KVCache& cache, int64_t batch, int64_t capacity) const {
  MDLM_CHECK(capacity <= cfg_.max_position_embeddings, "KV cache of ", capacity,
             " rows is longer than the model's --max-position-embeddings ", cfg_.max_position_embeddings);
  cache.allocate(cfg_.num_layers, batch, capacity, cfg_.num_query_groups * cfg_.kv_channels);
}

Tensor LanguageModel::forward_logits_cached(const MicroBatch& mb, KVCache& cache, int64_t first_seq,
                                            const int64_t* offsets, bool causal, bool last_only) {
  MDLM_CHECK(first_seq >= 0 && first_seq + mb.B <= cache.B, "KV cache: sequences [", first_seq, ", ",
             first_seq + mb.B, ") exceed its batch ", cache.B);
  MDLM_CHECK(static_cast<int64_t>(cache.k.size()) == cfg_.num_layers, "KV cache was not allocated for this model");
  const BatchInfo info = mb.info();
  Tensor x = embedding_.forward(arena_, mb.tokens, info);
  for (size_t l = 0; l < layers_.size(); ++l)
    x = layers_[l]->forward_cached(arena_, x, info, cache.k_at(static_cast<int64_t>(l), first_seq),
                                   cache.v_at(static_cast<int64_t>(l), first_seq), cache.S, offsets, causal);
  if (last_only && mb.T > 1) {
    // Only the last row of each sequence feeds the head: the [T, V] logits are not needed.
    const int64_t C = cfg_.hidden_size;
    Tensor last = arena_.tensor({mb.B, C});
    for (int64_t b = 0; b < mb.B; ++b)
      std::copy(x.data<float>() + ((b + 1) * mb.T - 1) * C, x.data<float>() + (b + 1) * mb.T * C,
                last.data<float>() + b * C);
    x = last;
  }
  return head_.logits(arena_, final_norm_.forward(arena_, x));
}

}  // namespace megadlm
