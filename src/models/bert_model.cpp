#include "models/bert_model.h"

#include "kernels/backend.h"
#include "models/language_model.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

namespace {

bool has_head(const ModelSpec& spec, HeadKind kind) {
  for (const HeadSpec& h : spec.heads)
    if (h.kind == kind) return true;
  return false;
}

}  // namespace

BertModel::BertModel(const TransformerConfig& cfg, const ModelSpec& spec, const ParallelContext& ctx)
    : cfg_(cfg), ctx_(ctx), pre_process_(ctx.is_first_stage()), post_process_(ctx.is_last_stage()) {
  validate_config(cfg);
  MEGADLM_CHECK(ctx.cp.size == 1, "--model-type bert is built over whole sequences: context parallelism ",
                "(--context-parallel-size ", ctx.cp.size, ") is not available for it yet");
  MEGADLM_CHECK(spec.stacks.size() == 1 && has_head(spec, HeadKind::MLM) && spec.embedding.token_types > 0,
                "BertModel builds BERT specs (bert_model_spec): one stack, token types, an MLM head");
  const StackSpec& stack = spec.stacks[0];
  MEGADLM_CHECK(stack.num_layers == cfg.num_layers, "BertModel: the stack of ", stack.num_layers,
                " layers must be --num-layers ", cfg.num_layers);
  const LayerSpec layer = stack.layer(0);
  pre_norm_ = layer.norm.placement == NormPlacement::Pre;
  exact_gelu_ = layer.mlp.host_activation == HostActivation::GeluErf;
  binary_ = has_head(spec, HeadKind::PoolerBinary);
  token_types_ = spec.embedding.token_types;
  layer_range_ = pipeline_stage_layers(cfg, ctx.pp.size, ctx.pp.rank);
  if (pre_process_) embedding_ = Embedding(params_, ctx_, cfg_, spec.embedding);
  encoder_ = TransformerBlock(params_, ctx_, cfg_, stack, layer_range_);
  if (post_process_) {
    if (stack.final_norm) final_norm_ = make_norm(params_, ctx_, stack.final_norm_name, stack.final_norm_kind, cfg_);
    const int decoder = pre_process_ ? embedding_.word_embeddings_id() : add_word_embeddings(params_, ctx_, cfg_);
    mlm_ = MLMHead(params_, ctx_, cfg_, decoder, exact_gelu_);
    if (binary_) pooler_ = PoolerBinaryHead(params_, ctx_, cfg_);
  }
  if (ctx.pp.size > 1 && pre_process_ != post_process_) shared_embedding_ = params_.find("embed_tokens.weight");
  params_.finalize();
}

void BertModel::set_precision(const PrecisionConfig& cfg) {
  precision_ = std::make_unique<MixedPrecision>(params_, cfg);
  MixedPrecision* p = cfg.mode == PrecisionMode::FP32 ? nullptr : precision_.get();
  encoder_.set_precision(p);
  mlm_.set_precision(p);
}

void BertModel::micro_batch_of(const BertBatch& b, MicroBatch& mb) {
  const size_t N = static_cast<size_t>(b.B * b.T);
  MEGADLM_CHECK(b.B >= 1 && b.T >= 1 && b.tokens.size() == N, "BERT batch: ", b.tokens.size(), " tokens for ", b.B,
                " sequences of ", b.T);
  auto sized = [&](const std::vector<int32_t>& v, const char* what) {
    MEGADLM_CHECK(v.empty() || v.size() == N, "BERT batch: ", v.size(), " ", what, " for ", N, " tokens");
  };
  sized(b.token_types, "token types");
  sized(b.positions, "positions");
  sized(b.attention_mask, "attention-mask entries");
  MEGADLM_CHECK(b.mlm_weights.empty() || b.mlm_weights.size() == N, "BERT batch: ", b.mlm_weights.size(),
                " MLM weights for ", N, " tokens");
  MEGADLM_CHECK(b.binary_labels.empty() || b.binary_labels.size() == static_cast<size_t>(b.B), "BERT batch: ",
                b.binary_labels.size(), " binary labels for ", b.B, " sequences");
  mb.B = b.B;
  mb.T = b.T;
  mb.tokens = b.tokens;
  mb.token_types = b.token_types.empty() ? std::vector<int32_t>(N, 0) : b.token_types;
  mb.positions = b.positions;
  if (mb.positions.empty()) {
    mb.positions.resize(N);
    for (size_t i = 0; i < N; ++i) mb.positions[i] = static_cast<int32_t>(i % static_cast<size_t>(b.T));
  }
  // Segment 0 the tokens, 1 the padding: a token's query never sees a padded key.
  mb.segment_ids.clear();
  if (!b.attention_mask.empty()) {
    mb.segment_ids.resize(N);
    for (size_t i = 0; i < N; ++i) {
      MEGADLM_CHECK(b.attention_mask[i] == 0 || b.attention_mask[i] == 1, "BERT batch: attention mask entry ",
                    b.attention_mask[i], " at ", i, " is not 0 (padding) or 1 (token)");
      mb.segment_ids[i] = b.attention_mask[i] == 1 ? 0 : 1;
    }
  }
  mb.targets = b.mlm_labels;
  mb.weights = b.mlm_weights;
  mb.sequence_labels = b.binary_labels;
  mb.sequence_segment_ids.clear();
  mb.block_diffusion = 0;
}

namespace {

BatchInfo batch_info(const MicroBatch& mb) { return BatchInfo{mb.B, mb.T, mb.positions.data(), mb.segments()}; }

}  // namespace

int64_t BertModel::activation_floats(const MicroBatch& mb) const {
  return local_rows(ctx_, mb.B * mb.T) * cfg_.hidden_size;
}

Tensor BertModel::forward_stage(const MicroBatch& mb, const float* input) {
  const BatchInfo info = batch_info(mb);
  Tensor x;
  if (pre_process_) {
    x = embedding_.forward(arena_, mb.tokens.data(), info, mb.token_types.data());
  } else {
    MEGADLM_CHECK(input != nullptr, "pipeline stage ", ctx_.pp.rank, " needs the previous stage's activation");
    // Copied: the layers keep pointers to their inputs until backward.
    x = arena_.tensor({local_rows(ctx_, mb.B * mb.T), cfg_.hidden_size});
    backend_of(x).copy(x.data<float>(), input, sizeof(float) * static_cast<size_t>(x.numel()));
  }
  x = encoder_.forward(arena_, x, info);
  return post_process_ && pre_norm_ ? final_norm_.forward(arena_, x) : x;
}

Tensor BertModel::forward_whole(const MicroBatch& mb) {
  MEGADLM_CHECK(pre_process_ && post_process_, "pipeline stage ", ctx_.pp.rank,
                ": whole-model calls need one stage; use the pipeline schedule (train/pipeline_schedule.h)");
  arena_.reset();
  return forward_stage(mb, nullptr);
}

BertModel::Logits BertModel::forward_logits(const BertBatch& b) {
  MicroBatch mb;
  micro_batch_of(b, mb);
  return head_logits(mb, forward_whole(mb));
}

BertModel::Logits BertModel::head_logits(const MicroBatch& mb, const Tensor& h) {
  Logits out;
  out.mlm = mlm_.logits(arena_, h);
  if (binary_) out.binary = pooler_.logits(arena_, h, mb.B, mb.T);
  return out;
}

BertLosses BertModel::losses(const MicroBatch& mb, const Tensor& h, Tensor* dh, float grad_scale) {
  const size_t N = static_cast<size_t>(mb.B * mb.T);
  MEGADLM_CHECK(post_process_, "pipeline stage ", ctx_.pp.rank, " is not the last: it has no heads");
  MEGADLM_CHECK(mb.targets.size() == N, "BERT batch: ", mb.targets.size(), " MLM labels for ", N, " tokens");
  MEGADLM_CHECK(mb.sequence_labels.empty() || binary_, "BERT batch: binary labels for a model without the binary head");
  BertLosses l;
  l.mlm = mlm_.loss(arena_, h, mb.targets.data(), mb.weights_or_null(), grad_scale, dh);
  if (!mb.sequence_labels.empty())
    l.binary = pooler_.loss(arena_, h, mb.B, mb.T, mb.sequence_labels.data(), grad_scale, dh);
  return l;
}

BertLosses BertModel::stage_losses(const MicroBatch& mb, const Tensor& out, Logits* logits) {
  const BertLosses l = losses(mb, out, nullptr, 1.0f);
  if (logits) *logits = head_logits(mb, out);
  return l;
}

BertLosses BertModel::forward_loss(const BertBatch& b, Logits* logits) {
  MicroBatch mb;
  micro_batch_of(b, mb);
  const BertLosses l = stage_losses(mb, forward_whole(mb), logits);
  if (!logits) arena_.reset();
  return l;
}

double BertModel::loss_stage(const MicroBatch& mb, const Tensor& out, float* per_token_loss) {
  MEGADLM_CHECK(per_token_loss == nullptr, "BertModel: per-token losses are not available");
  const BertLosses l = stage_losses(mb, out, nullptr);
  arena_.reset();
  return l.mlm + l.binary;
}

BertLosses BertModel::backward(const MicroBatch& mb, const Tensor& out, const float* output_grad, float grad_scale,
                               float* input_grad) {
  Tensor g0 = arena_.tensor(out.shape()), g1 = arena_.tensor(out.shape());
  Tensor *dy = &g0, *dx = &g1;
  BertLosses l;
  if (post_process_) {
    // g0 := dL/dh: the MLM head writes it, the binary head adds its first rows.
    l = losses(mb, out, &g0, grad_scale);
    if (pre_norm_) {
      final_norm_.backward(g0, g1);
      std::swap(dy, dx);
    }
  } else {
    MEGADLM_CHECK(output_grad != nullptr, "pipeline stage ", ctx_.pp.rank, " needs the next stage's gradient");
    backend_of(g0).copy(g0.data<float>(), output_grad, sizeof(float) * static_cast<size_t>(g0.numel()));
  }
  encoder_.backward(arena_, batch_info(mb), dy, dx, [](int64_t) {});
  if (pre_process_) {
    embedding_.backward(*dy);
  } else {
    MEGADLM_CHECK(input_grad != nullptr, "pipeline stage ", ctx_.pp.rank, ": no buffer for the input gradient");
    backend_of(*dy).copy(input_grad, dy->data<float>(), sizeof(float) * static_cast<size_t>(dy->numel()));
  }
  arena_.reset();
  return l;
}

double BertModel::backward_stage(const MicroBatch& mb, const Tensor& out, const float* output_grad, float grad_scale,
                                 float* input_grad, float* per_token_loss) {
  MEGADLM_CHECK(per_token_loss == nullptr, "BertModel: per-token losses are not available");
  const BertLosses l = backward(mb, out, output_grad, grad_scale, input_grad);
  if (post_process_) stage_losses_.push_back(l);
  return l.mlm + l.binary;
}

std::vector<BertLosses> BertModel::take_stage_losses() {
  std::vector<BertLosses> out;
  out.swap(stage_losses_);
  return out;
}

BertLosses BertModel::forward_backward(const BertBatch& b, float grad_scale) {
  MicroBatch mb;
  micro_batch_of(b, mb);
  return backward(mb, forward_whole(mb), nullptr, grad_scale, nullptr);
}

}  // namespace megadlm
