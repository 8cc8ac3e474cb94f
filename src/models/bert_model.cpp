#include "models/bert_model.h"

#include "kernels/backend.h"
#include "models/language_model.h"

namespace megadlm {

namespace {

bool has_head(const ModelSpec& spec, HeadKind kind) {
  for (const HeadSpec& h : spec.heads)
    if (h.kind == kind) return true;
  return false;
}

}  // namespace

BertModel::BertModel(const TransformerConfig& cfg, const ModelSpec& spec, const ParallelContext& ctx)
    : cfg_(cfg), ctx_(ctx) {
  validate_config(cfg);
  MEGADLM_CHECK(ctx.pp.size == 1 && ctx.cp.size == 1,
                "--model-type bert is built as one pipeline stage over whole sequences: pipeline and context ",
                "parallelism (--pipeline-model-parallel-size ", ctx.pp.size, ", --context-parallel-size ", ctx.cp.size,
                ") are not available for it yet");
  MEGADLM_CHECK(spec.stacks.size() == 1 && has_head(spec, HeadKind::MLM) && spec.embedding.token_types > 0,
                "BertModel builds BERT specs (bert_model_spec): one stack, token types, an MLM head");
  const StackSpec& stack = spec.stacks[0];
  MEGADLM_CHECK(stack.num_layers == cfg.num_layers, "BertModel: the stack of ", stack.num_layers,
                " layers must be --num-layers ", cfg.num_layers);
  const LayerSpec layer = stack.layer(0);
  pre_norm_ = layer.norm.placement == NormPlacement::Pre;
  exact_gelu_ = layer.mlp.host_activation == HostActivation::GeluErf;
  binary_ = has_head(spec, HeadKind::PoolerBinary);
  embedding_ = Embedding(params_, ctx_, cfg_, spec.embedding);
  encoder_ = TransformerBlock(params_, ctx_, cfg_, stack, LayerRange{0, stack.num_layers});
  if (stack.final_norm) final_norm_ = make_norm(params_, ctx_, stack.final_norm_name, stack.final_norm_kind, cfg_);
  mlm_ = MLMHead(params_, ctx_, cfg_, embedding_.word_embeddings_id(), exact_gelu_);
  if (binary_) pooler_ = PoolerBinaryHead(params_, ctx_, cfg_);
  params_.finalize();
}

void BertModel::set_precision(const PrecisionConfig& cfg) {
  precision_ = std::make_unique<MixedPrecision>(params_, cfg);
  MixedPrecision* p = cfg.mode == PrecisionMode::FP32 ? nullptr : precision_.get();
  encoder_.set_precision(p);
  mlm_.set_precision(p);
}

BertModel::Inputs BertModel::inputs(const BertBatch& b) const {
  const size_t N = static_cast<size_t>(b.B * b.T);
  MEGADLM_CHECK(b.B >= 1 && b.T >= 1 && b.tokens.size() == N, "BERT batch: ", b.tokens.size(), " tokens for ", b.B,
                " sequences of ", b.T);
  auto sized = [&](const std::vector<int32_t>& v, const char* what) {
    MEGADLM_CHECK(v.empty() || v.size() == N, "BERT batch: ", v.size(), " ", what, " for ", N, " tokens");
  };
  sized(b.token_types, "token types");
  sized(b.positions, "positions");
  sized(b.attention_mask, "attention-mask entries");
  Inputs in;
  in.token_types = b.token_types.empty() ? std::vector<int32_t>(N, 0) : b.token_types;
  in.positions = b.positions;
  if (in.positions.empty()) {
    in.positions.resize(N);
    for (size_t i = 0; i < N; ++i) in.positions[i] = static_cast<int32_t>(i % static_cast<size_t>(b.T));
  }
  // Segment 0 the tokens, 1 the padding: a token's query never sees a padded key.
  if (!b.attention_mask.empty()) {
    in.segments.resize(N);
    for (size_t i = 0; i < N; ++i) {
      MEGADLM_CHECK(b.attention_mask[i] == 0 || b.attention_mask[i] == 1, "BERT batch: attention mask entry ",
                    b.attention_mask[i], " at ", i, " is not 0 (padding) or 1 (token)");
      in.segments[i] = b.attention_mask[i] == 1 ? 0 : 1;
    }
  }
  return in;
}

BatchInfo BertModel::Inputs::batch_info(int64_t B, int64_t T) const {
  return BatchInfo{B, T, positions.data(), segments.empty() ? nullptr : segments.data()};
}

Tensor BertModel::encode(const BertBatch& b, const Inputs& in) {
  const BatchInfo info = in.batch_info(b.B, b.T);
  Tensor x = embedding_.forward(arena_, b.tokens.data(), info, in.token_types.data());
  x = encoder_.forward(arena_, x, info);
  return pre_norm_ ? final_norm_.forward(arena_, x) : x;
}

BertModel::Logits BertModel::forward_logits(const BertBatch& b) {
  arena_.reset();
  const Inputs in = inputs(b);
  return head_logits(b, encode(b, in));
}

BertModel::Logits BertModel::head_logits(const BertBatch& b, const Tensor& h) {
  Logits out;
  out.mlm = mlm_.logits(arena_, h);
  if (binary_) out.binary = pooler_.logits(arena_, h, b.B, b.T);
  return out;
}

BertLosses BertModel::losses(const BertBatch& b, const Tensor& h, Tensor* dh, float grad_scale) {
  const size_t N = static_cast<size_t>(b.B * b.T);
  MEGADLM_CHECK(b.mlm_labels.size() == N, "BERT batch: ", b.mlm_labels.size(), " MLM labels for ", N, " tokens");
  MEGADLM_CHECK(b.mlm_weights.empty() || b.mlm_weights.size() == N, "BERT batch: ", b.mlm_weights.size(),
                " MLM weights for ", N, " tokens");
  MEGADLM_CHECK(b.binary_labels.empty() || binary_, "BERT batch: binary labels for a model without the binary head");
  MEGADLM_CHECK(b.binary_labels.empty() || b.binary_labels.size() == static_cast<size_t>(b.B), "BERT batch: ",
                b.binary_labels.size(), " binary labels for ", b.B, " sequences");
  BertLosses l;
  const float* w = b.mlm_weights.empty() ? nullptr : b.mlm_weights.data();
  l.mlm = mlm_.loss(arena_, h, b.mlm_labels.data(), w, grad_scale, dh);
  if (!b.binary_labels.empty())
    l.binary = pooler_.loss(arena_, h, b.B, b.T, b.binary_labels.data(), grad_scale, dh);
  return l;
}

BertLosses BertModel::forward_loss(const BertBatch& b, Logits* logits) {
  arena_.reset();
  const Inputs in = inputs(b);
  const Tensor h = encode(b, in);
  const BertLosses l = losses(b, h, nullptr, 1.0f);
  if (logits)
    *logits = head_logits(b, h);
  else
    arena_.reset();
  return l;
}

BertLosses BertModel::forward_backward(const BertBatch& b, float grad_scale) {
  arena_.reset();
  const Inputs in = inputs(b);
  const Tensor h = encode(b, in);
  Tensor g0 = arena_.tensor(h.shape()), g1 = arena_.tensor(h.shape());
  // g0 := dL/dh: the MLM head writes it, the binary head adds its first rows.
  const BertLosses l = losses(b, h, &g0, grad_scale);
  Tensor *dy = &g0, *dx = &g1;
  if (pre_norm_) {
    final_norm_.backward(g0, g1);
    std::swap(dy, dx);
  }
  encoder_.backward(arena_, in.batch_info(b.B, b.T), dy, dx, [](int64_t) {});
  embedding_.backward(*dy);
  arena_.reset();
  return l;
}

}  // namespace megadlm
