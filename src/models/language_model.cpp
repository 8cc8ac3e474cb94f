#include "models/language_model.h"

#include <algorithm>
#include <type_traits>

#include "kernels/backend.h"
#include "nn/moe/moe_counts.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

void validate_config(const TransformerConfig& c) {
  MEGADLM_CHECK(c.num_layers >= 1, "--num-layers must be at least 1, got ", c.num_layers);
  MEGADLM_CHECK(c.hidden_size >= 1, "--hidden-size must be positive, got ", c.hidden_size);
  MEGADLM_CHECK(c.num_attention_heads >= 1, "--num-attention-heads must be positive, got ", c.num_attention_heads);
  MEGADLM_CHECK(c.num_query_groups >= 1 && c.num_attention_heads % c.num_query_groups == 0,
                "--num-query-groups ", c.num_query_groups, " does not divide --num-attention-heads ",
                c.num_attention_heads);
  MEGADLM_CHECK(c.kv_channels >= 1, "--kv-channels must be positive, got ", c.kv_channels);
  MEGADLM_CHECK(c.position_embedding != PositionEmbedding::Rope || c.kv_channels % 2 == 0,
                "RoPE needs an even head dimension (--kv-channels), got ", c.kv_channels);
  MEGADLM_CHECK(c.ffn_hidden_size >= 1, "--ffn-hidden-size must be positive, got ", c.ffn_hidden_size);
  MEGADLM_CHECK(c.vocab_size >= 2, "vocabulary size must be at least 2, got ", c.vocab_size);
  MEGADLM_CHECK(c.max_position_embeddings >= 1, "--max-position-embeddings must be positive");
  MEGADLM_CHECK(c.norm_epsilon > 0, "--norm-epsilon must be positive, got ", c.norm_epsilon);
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

LayerRange pipeline_stage_layers(const TransformerConfig& cfg, int pp_size, int pp_rank) {
  MEGADLM_CHECK(pp_size >= 1 && pp_rank >= 0 && pp_rank < pp_size, "pipeline stage ", pp_rank, " of ", pp_size);
  MEGADLM_CHECK(cfg.num_layers % pp_size == 0, "--num-layers ", cfg.num_layers,
                " is not divisible by --pipeline-model-parallel-size ", pp_size,
                ": every pipeline stage must get the same number of layers");
  const int64_t per_stage = cfg.num_layers / pp_size;
  return LayerRange{pp_rank * per_stage, (pp_rank + 1) * per_stage};
}

LanguageModel::LanguageModel(const TransformerConfig& cfg, const ModelSpec& spec, const ParallelContext& ctx,
                             bool pre_process, bool post_process, Device device,
                             const EmbeddingInsertsFactory& inserts)
    : cfg_(cfg),
      ctx_(ctx),
      pre_process_(pre_process && ctx.is_first_stage()),
      post_process_(post_process && ctx.is_last_stage()) {
  validate_config(cfg);
  MEGADLM_CHECK(spec.stacks.size() == 1 && spec.heads.size() == 1 && spec.heads[0].kind == HeadKind::LM,
                "LanguageModel builds decoder-only models: a spec of one stack and an LM head");
  const StackSpec& stack = spec.stacks[0];
  MEGADLM_CHECK(stack.num_layers == cfg.num_layers && stack.final_norm, "LanguageModel: the stack of ",
                stack.num_layers, " layers must be --num-layers ", cfg.num_layers, " and end in a final norm");
  if (device != Device::CPU) {
    backend_for(device);  // throws when the build has no CUDA or no GPU is visible
    params_.set_device(device);
    arena_.set_device(device);
  }
  layer_range_ = pipeline_stage_layers(cfg, ctx.pp.size, ctx.pp.rank);
  // The inserted rows replace rows of the token embedding's output, so their module (and its
  // parameters) lives where the embedding does: the first stage only.
  if (inserts && pre_process_) inserts_ = inserts(params_, ctx_);
  if (pre_process_) embedding_ = Embedding(params_, ctx_, cfg_, spec.embedding);
  decoder_ = TransformerBlock(params_, ctx_, cfg_, stack, layer_range_);
  const bool tied = spec.heads[0].tied;
  final_norm_first_param_ = params_.count();
  if (post_process_) {
    final_norm_ = make_norm(params_, ctx_, stack.final_norm_name, stack.final_norm_kind, cfg);
    int head_weight = -1;
    if (tied && pre_process_) {
      head_weight = embedding_.word_embeddings_id();
    } else if (tied) {
      head_weight = add_word_embeddings(params_, ctx_, cfg);  // the last stage's copy of the tied matrix
    }
    head_ = LMHead(params_, cfg_, head_weight, &ctx_);
  }
  if (tied && ctx.pp.size > 1 && pre_process_ != post_process_)
    shared_embedding_ = pre_process_ ? embedding_.word_embeddings_id() : params_.find("embed_tokens.weight");
  params_.finalize();
}

void LanguageModel::set_precision(const PrecisionConfig& cfg) {
  precision_ = std::make_unique<MixedPrecision>(params_, cfg);
  MixedPrecision* p = cfg.mode == PrecisionMode::FP32 ? nullptr : precision_.get();
  decoder_.set_precision(p);
  if (post_process_) head_.set_precision(p);
}

void LanguageModel::set_recompute(const RecomputeConfig& cfg) {
  MEGADLM_CHECK(cfg.granularity != RecomputeGranularity::Full || !cfg_.moe.enabled(),
                "--recompute-granularity full is not available with MoE layers yet");
  decoder_.set_recompute(cfg);
}

// Temporaries that no later step reads (the output layer's chunks of logits): the precision policy's
// transient arena, which is empty between the layers' forward and backward, or the arena in fp32.
Arena& LanguageModel::work_arena() {
  return precision_ && precision_->mode() != PrecisionMode::FP32 ? precision_->transient() : arena_;
}

LanguageModel::Staged LanguageModel::host_arrays(const MicroBatch& mb) {
  const BatchInfo info{mb.B,    mb.T,    mb.positions.empty() ? nullptr : mb.positions.data(), mb.segments(),
                       mb.sequence_segments(), nullptr, nullptr, 0, mb.weight, mb.block_diffusion};
  return Staged{mb.tokens.data(), mb.targets.empty() ? nullptr : mb.targets.data(), mb.weights_or_null(), info};
}

LanguageModel::Staged LanguageModel::stage(const MicroBatch& mb) {
  Staged s = host_arrays(mb);
  if (device() == Device::CPU) return s;
  if (pre_process_) embedding_.check_ids(s.tokens, s.info);
  const Backend& be = backend_for(device());
  const size_t N = static_cast<size_t>(mb.B * mb.T);
  auto upload = [&](const auto* host) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(host)>>;
    if (host == nullptr) return static_cast<const T*>(nullptr);
    void* p = arena_.allocate(N * sizeof(T));
    be.copy_to_device(p, host, N * sizeof(T));
    return static_cast<const T*>(p);
  };
  staged_from_ = mb.tokens.data();
  s.tokens = upload(s.tokens);
  s.info.positions = upload(s.info.positions);
  s.info.segment_ids = upload(s.info.segment_ids);
  s.targets = upload(s.targets);
  s.weights = upload(s.weights);
  staged_ = s;
  return s;
}

LanguageModel::Staged LanguageModel::staged(const MicroBatch& mb) const {
  if (device() == Device::CPU) return host_arrays(mb);
  MEGADLM_CHECK(staged_from_ != nullptr && staged_from_ == mb.tokens.data(),
                "LanguageModel: backward_stage / loss_stage of a micro-batch that forward_stage did not upload");
  return staged_;
}

int64_t LanguageModel::activation_floats(const MicroBatch& mb) const {
  return local_rows(ctx_, mb.B * mb.T) * cfg_.hidden_size;
}

Tensor LanguageModel::forward_hidden(const MicroBatch& mb) {
  MEGADLM_CHECK(pre_process_ && post_process_, "pipeline stage ", ctx_.pp.rank,
                ": whole-model calls need one stage; use the pipeline schedule (train/pipeline_schedule.h)");
  return forward_stage(mb, nullptr);
}

Tensor LanguageModel::forward_stage(const MicroBatch& mb_host, const float* input) {
  const Staged mb = stage(mb_host);
  const BatchInfo& info = mb.info;
  Tensor x;
  if (pre_process_) {
    x = embedding_.forward(arena_, mb.tokens, info);
    if (inserts_) inserts_->forward(mb_host, info, x);
  } else {
    MEGADLM_CHECK(input != nullptr, "pipeline stage ", ctx_.pp.rank, " needs the previous stage's activation");
    // Copied: the layers keep pointers to their inputs until backward.
    x = arena_.tensor({local_rows(ctx_, info.B * info.T), cfg_.hidden_size});  // N/tp rows under sequence parallel
    backend_for(device()).copy(x.data<float>(), input, sizeof(float) * static_cast<size_t>(x.numel()));
  }
  x = decoder_.forward(arena_, x, info);  // with recomputation when set
  return post_process_ ? final_norm_.forward(arena_, x) : x;
}

double LanguageModel::backward_stage(const MicroBatch& host_mb, const Tensor& out, const float* output_grad,
                                     float grad_scale, float* input_grad, float* per_token_loss) {
  const Staged mb = staged(host_mb);
  const Shape shape = out.shape();
  // Two gradient buffers, ping-ponged down the layers, so the backward's memory is O(N*C) on top of
  // the saved activations.
  Tensor g0 = arena_.tensor(shape), g1 = arena_.tensor(shape);
  Tensor* dy = &g1;
  Tensor* dx = &g0;
  double loss = 0;
  if (post_process_) {
    // On a device the head also gets the host labels, to run the output layer on the rows with a loss.
    if (device() != Device::CPU) head_.set_host_labels(host_mb.targets.data(), host_mb.weights_or_null());
    loss = head_.loss_and_backward(work_arena(), out, mb.targets, mb.weights, grad_scale, g0, per_token_loss);
    head_.set_host_labels(nullptr, nullptr);
    final_norm_.backward(g0, g1);
    if (grads_ready_) grads_ready_(final_norm_first_param_);
  } else {
    MEGADLM_CHECK(output_grad != nullptr, "pipeline stage ", ctx_.pp.rank, " needs the next stage's gradient");
    backend_for(device()).copy(g1.data<float>(), output_grad, sizeof(float) * static_cast<size_t>(g1.numel()));
  }
  decoder_.backward(arena_, mb.info, dy, dx, [this](int64_t l) {
    if (grads_ready_) grads_ready_(decoder_.first_param(l));
  });
  if (pre_process_) {
    if (inserts_) inserts_->backward(host_mb, mb.info, *dy);
    embedding_.backward(*dy);
  } else {
    MEGADLM_CHECK(input_grad != nullptr, "pipeline stage ", ctx_.pp.rank, ": no buffer for the input gradient");
    backend_for(device()).copy(input_grad, dy->data<float>(), sizeof(float) * static_cast<size_t>(dy->numel()));
  }
  if (grads_ready_) grads_ready_(0);
  arena_.reset();
  staged_from_ = nullptr;  // the uploaded arrays were in the arena
  return loss;
}

double LanguageModel::loss_stage(const MicroBatch& host_mb, const Tensor& out, float* per_token_loss) {
  const Staged mb = staged(host_mb);
  MEGADLM_CHECK(post_process_, "pipeline stage ", ctx_.pp.rank, " is not the last: it has no loss");
  // As in backward_stage: on a device the host labels select the rows with a loss, the same rows.
  if (device() != Device::CPU) head_.set_host_labels(host_mb.targets.data(), host_mb.weights_or_null());
  const double loss = head_.loss(work_arena(), out, mb.targets, mb.weights, per_token_loss);  // vocab-parallel
  head_.set_host_labels(nullptr, nullptr);
  arena_.reset();
  staged_from_ = nullptr;
  return loss;
}

double LanguageModel::forward_backward(const MicroBatch& mb, float grad_scale, float* per_token_loss) {
  Tensor h = forward_hidden(mb);
  return backward_stage(mb, h, nullptr, grad_scale, nullptr, per_token_loss);
}

double LanguageModel::forward_loss(const MicroBatch& mb, float* per_token_loss) {
  return loss_stage(mb, forward_hidden(mb), per_token_loss);
}

std::vector<MoELayer*> LanguageModel::moe_layers() { return decoder_.moe_layers(); }

// On a device the logits come back to the host for the samplers and scorers (infer/): one download.
Tensor LanguageModel::logits_on_host(const Tensor& logits) const {
  if (logits.device() == Device::CPU) return logits;
  Tensor host = Tensor::empty(logits.shape(), DType::F32);
  host.copy_from(logits);
  return host;
}

Tensor LanguageModel::forward_logits(const MicroBatch& mb) {
  Tensor h = forward_hidden(mb);
  return logits_on_host(head_.full_logits(arena_, h));  // gathered over the vocabulary at tp > 1
}

void LanguageModel::allocate_cache(KVCache& cache, int64_t batch, int64_t capacity) const {
  MEGADLM_CHECK(capacity <= cfg_.max_position_embeddings, "KV cache of ", capacity,
                " rows is longer than the model's --max-position-embeddings ", cfg_.max_position_embeddings);
  // This rank's KV groups only under tensor parallelism.
  cache.allocate(cfg_.num_layers, batch, capacity, cfg_.num_query_groups / ctx_.tp.size * cfg_.kv_channels, device());
}

Tensor LanguageModel::forward_logits_cached(const MicroBatch& mb, KVCache& cache, int64_t first_seq,
                                            const int64_t* offsets, bool causal, bool last_only) {
  MEGADLM_CHECK(pre_process_ && post_process_, "inference with a KV cache needs the whole model on one pipeline stage");
  MEGADLM_CHECK(!sequence_parallel(ctx_), "inference with a KV cache: build the model without --sequence-parallel");
  MEGADLM_CHECK(first_seq >= 0 && first_seq + mb.B <= cache.B, "KV cache: sequences [", first_seq, ", ",
                first_seq + mb.B, ") exceed its batch ", cache.B);
  MEGADLM_CHECK(static_cast<int64_t>(cache.k.size()) == cfg_.num_layers && cache.device == device(),
                "KV cache was not allocated for this model");
  const Staged dmb = stage(mb);  // on a device: the tokens and positions uploaded
  const BatchInfo& info = dmb.info;
  Tensor x = embedding_.forward(arena_, dmb.tokens, info);
  if (inserts_) inserts_->forward(mb, info, x);
  x = decoder_.forward_cached(arena_, x, info, cache, first_seq, offsets, causal);
  if (last_only && mb.T > 1) {
    // Only the last row of each sequence feeds the head: the [T, V] logits are not needed.
    const int64_t C = cfg_.hidden_size;
    const Backend& be = backend_of(x);
    Tensor last = arena_.tensor({mb.B, C});
    for (int64_t b = 0; b < mb.B; ++b)
      be.copy(last.data<float>() + b * C, x.data<float>() + ((b + 1) * mb.T - 1) * C, sizeof(float) * C);
    x = last;
  }
  return logits_on_host(head_.full_logits(arena_, final_norm_.forward(arena_, x)));
}

}  // namespace megadlm
