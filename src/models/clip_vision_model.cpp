#include "models/clip_vision_model.h"

#include <algorithm>

#include "models/language_model.h"

namespace megadlm {

namespace {

// The tower's rows are whole images, not the language model's token rows: its activations are never split
// along the rows (no sequence parallelism), whatever the language model does.
ParallelContext tower_context(const ParallelContext& ctx) {
  ParallelContext c = ctx;
  c.sequence_parallel = false;
  return c;
}

}  // namespace

ClipVisionModel::ClipVisionModel(const TransformerConfig& cfg, const ClipVisionOptions& opt,
                                 const ParallelContext& ctx, ParamStore* store, const std::string& prefix)
    : cfg_(cfg), opt_(opt), ctx_(tower_context(ctx)), params_(store ? *store : own_params_) {
  validate_config(cfg);
  MEGADLM_CHECK(ctx.pp.size == 1 && ctx.cp.size == 1,
                "CLIP's vision tower runs whole on one pipeline stage, over whole images (no pipeline or context ",
                "parallelism)");
  MEGADLM_CHECK(cfg.num_attention_heads % ctx.tp.size == 0 && cfg.ffn_hidden_size % ctx.tp.size == 0,
                "CLIP's vision tower under --tensor-model-parallel-size ", ctx.tp.size,
                ": --vision-num-attention-heads ", cfg.num_attention_heads, " and --vision-ffn-hidden-size ",
                cfg.ffn_hidden_size, " must divide by it");
  const ModelSpec spec = clip_vision_model_spec(cfg, opt);
  StackSpec stack = spec.stacks[0];
  stack.prefix = prefix + stack.prefix;
  const int64_t f = clip_feature_layers(cfg.num_layers, opt.feature_layer);
  // Registration order: the embeddings and pre_layrnorm, the layers in order, post_layernorm (HF's).
  embedding_ = PatchEmbedding(params_, prefix + "embeddings", opt.image_size, opt.patch_size, cfg.hidden_size,
                              cfg.init_method_std);
  pre_norm_ = make_norm(params_, ctx_, prefix + "pre_layrnorm", NormKind::LayerNorm, cfg_);
  to_features_ = TransformerBlock(params_, ctx_, cfg_, stack, LayerRange{0, f});
  after_features_ = TransformerBlock(params_, ctx_, cfg_, stack, LayerRange{f, cfg.num_layers});
  post_norm_ = make_norm(params_, ctx_, prefix + "post_layernorm", NormKind::LayerNorm, cfg_);
  if (store == nullptr) params_.finalize();
}

ClipVisionModel::Outputs ClipVisionModel::forward(const Tensor& pixels, bool all) {
  arena_.reset();
  const int64_t B = pixels.dim() == 4 ? pixels.size(0) : 0, S = embedding_.rows_per_image(), P = patches();
  const int64_t C = cfg_.hidden_size;
  batch_ = BatchInfo{B, S, nullptr, nullptr};
  Tensor h = pre_norm_.forward(arena_, embedding_.forward(arena_, pixels));
  h = to_features_.forward(arena_, h, batch_);
  Outputs out;
  out.features = arena_.tensor({B * P, C});
  for (int64_t b = 0; b < B; ++b)  // each image's rows 1.. (the class token dropped)
    std::copy(h.data<float>() + (b * S + 1) * C, h.data<float>() + (b * S + S) * C,
              out.features.data<float>() + b * P * C);
  if (!all) return out;
  out.last_hidden = after_features_.forward(arena_, h, batch_);
  Tensor cls = arena_.tensor({B, C});
  for (int64_t b = 0; b < B; ++b)
    std::copy(out.last_hidden.data<float>() + b * S * C, out.last_hidden.data<float>() + (b * S + 1) * C,
              cls.data<float>() + b * C);
  out.pooled = post_norm_.forward(arena_, cls);
  return out;
}

void ClipVisionModel::backward(const Tensor& dfeatures) {
  if (frozen_) return;
  const int64_t B = batch_.B, S = batch_.T, P = patches(), C = cfg_.hidden_size;
  MEGADLM_CHECK(dfeatures.numel() == B * P * C, "ClipVisionModel::backward: ", dfeatures.numel(),
                " gradient values for the features of ", B, " images of ", P, " patches of ", C);
  const size_t mark = arena_.mark();
  Tensor g0 = arena_.tensor({B * S, C}), g1 = arena_.tensor({B * S, C});
  g0.zero_();  // the class rows are not among the features: no gradient
  for (int64_t b = 0; b < B; ++b)
    std::copy(dfeatures.data<float>() + b * P * C, dfeatures.data<float>() + (b + 1) * P * C,
              g0.data<float>() + (b * S + 1) * C);
  Tensor *dy = &g0, *dx = &g1;
  to_features_.backward(arena_, batch_, dy, dx, [](int64_t) {});
  pre_norm_.backward(*dy, *dx);
  embedding_.backward(*dx);
  arena_.release(mark);
}

}  // namespace megadlm
