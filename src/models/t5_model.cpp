#include "models/t5_model.h"

#include <cmath>

#include "kernels/backend.h"
#include "models/language_model.h"
#include "nn/vocab_gather.h"
#include "nn/vocab_parallel_cross_entropy.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

T5Model::T5Model(const TransformerConfig& cfg, const T5Options& opt, const ParallelContext& ctx)
    : cfg_(cfg), opt_(opt), ctx_(ctx) {
  validate_config(cfg);
  MEGADLM_CHECK(ctx.pp.size == 1 && ctx.cp.size == 1,
                "--model-type t5 is built as one pipeline stage over whole sequences: pipeline and context ",
                "parallelism (--pipeline-model-parallel-size ", ctx.pp.size, ", --context-parallel-size ", ctx.cp.size,
                ") are not available for it yet");
  MEGADLM_CHECK(!sequence_parallel(ctx), "--sequence-parallel is not available with --model-type t5 (its stacks ",
                "keep every row on every tensor-parallel rank: docs/t5.md)");
  const ModelSpec spec = t5_model_spec(cfg, opt);  // validates the T5 settings
  tied_ = spec.heads.at(0).tied;
  auto vocab_rows = [&](const char* name) {  // this rank's rows of a [V, C] matrix
    return params_.add_balanced_shard(name, {cfg.vocab_size, cfg.hidden_size}, 0, ctx.tp.size, ctx.tp.rank,
                                      Init::Normal, cfg.init_method_std);
  };
  embed_ = vocab_rows("embed_tokens.weight");
  vocab_start_ = params_.info(embed_).shard_begin;
  V_local_ = params_.info(embed_).shape[0];
  T5StackOptions so;
  so.num_buckets = opt.relative_attention_num_buckets;
  so.max_distance = opt.relative_attention_max_distance;
  so.feed_forward = opt.feed_forward;
  so.num_layers = spec.stacks.at(0).num_layers;
  encoder_ = T5Stack(params_, ctx_, "encoder", cfg_, so);
  so.num_layers = spec.stacks.at(1).num_layers;
  so.decoder = true;
  decoder_ = T5Stack(params_, ctx_, "decoder", cfg_, so);
  output_ = tied_ ? embed_ : vocab_rows("lm_head.weight");
  head_ = OutputProducts(params_, output_);
  params_.finalize();
}

void T5Model::set_precision(const PrecisionConfig& cfg) {
  precision_ = std::make_unique<MixedPrecision>(params_, cfg);
  MixedPrecision* p = cfg.mode == PrecisionMode::FP32 ? nullptr : precision_.get();
  encoder_.set_precision(p);
  decoder_.set_precision(p);
  head_.set_precision(p);
}

void T5Model::set_recompute(const RecomputeConfig& cfg) {
  encoder_.set_recompute(cfg);
  decoder_.set_recompute(cfg);
}

void T5Model::check(const T5Batch& b, bool labels) const {
  MEGADLM_CHECK(b.B >= 1 && b.S >= 1 && b.T >= 1, "T5 batch: ", b.B, " sequences of ", b.S, " encoder and ", b.T,
                " decoder rows");
  const auto enc = static_cast<size_t>(b.B * b.S), dec = static_cast<size_t>(b.B * b.T);
  auto sized = [](const std::vector<int32_t>& v, size_t n, bool optional, const char* what) {
    MEGADLM_CHECK((optional && v.empty()) || v.size() == n, "T5 batch: ", v.size(), " ", what, " for ", n, " rows");
  };
  auto ids = [&](const std::vector<int32_t>& v, const char* what, bool ignore) {
    for (size_t i = 0; i < v.size(); ++i)
      MEGADLM_CHECK((v[i] >= 0 && v[i] < cfg_.vocab_size) || (ignore && v[i] == kIgnoreIndex), "T5 batch: ", what, " ",
                    v[i], " at ", i, " is outside the vocabulary [0, ", cfg_.vocab_size, ")",
                    ignore ? " and not -100 (no loss)" : "");
  };
  auto mask = [](const std::vector<int32_t>& v, const char* what) {
    for (size_t i = 0; i < v.size(); ++i)
      MEGADLM_CHECK(v[i] == 0 || v[i] == 1, "T5 batch: ", what, " entry ", v[i], " at ", i,
                    " is not 0 (padding) or 1 (token)");
  };
  sized(b.encoder_tokens, enc, false, "encoder tokens");
  sized(b.encoder_mask, enc, true, "encoder mask entries");
  sized(b.decoder_tokens, dec, false, "decoder tokens");
  sized(b.decoder_mask, dec, true, "decoder mask entries");
  sized(b.labels, dec, !labels, "labels");
  ids(b.encoder_tokens, "encoder token", false);
  ids(b.decoder_tokens, "decoder token", false);
  ids(b.labels, "label", true);
  mask(b.encoder_mask, "encoder mask");
  mask(b.decoder_mask, "decoder mask");
}

Tensor T5Model::embed(const std::vector<int32_t>& tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  Tensor x = arena_.tensor({n, cfg_.hidden_size});
  // This rank's rows of the table (zero for the others' tokens), summed over tp.
  backend_of(x).embedding_forward(x.data<float>(), tokens.data(), params_.value(embed_).data<float>(), vocab_start_,
                                  V_local_, nullptr, nullptr, n, cfg_.hidden_size);
  tp_all_reduce_sum(ctx_, x.data<float>(), x.numel(), x.device());
  return x;
}

void T5Model::embed_backward(const std::vector<int32_t>& tokens, const Tensor& dx) {
  // dx is the same on every rank; each adds the rows of its own tokens.
  params_.mark_grad_written(embed_);
  backend_of(dx).embedding_backward(params_.grad(embed_).data<float>(), nullptr, dx.data<float>(), tokens.data(),
                                    vocab_start_, V_local_, nullptr, static_cast<int64_t>(tokens.size()),
                                    cfg_.hidden_size);
}

Tensor T5Model::decode(const T5Batch& b) {
  auto or_null = [](const std::vector<int32_t>& v) { return v.empty() ? nullptr : v.data(); };
  enc_in_ = T5StackInputs{};
  enc_in_.B = b.B;
  enc_in_.T = b.S;
  enc_in_.mask = or_null(b.encoder_mask);
  const Tensor memory = encoder_.forward(arena_, embed(b.encoder_tokens), enc_in_);
  memory_grad_ = arena_.zeros(memory.shape());
  dec_in_ = T5StackInputs{};
  dec_in_.B = b.B;
  dec_in_.T = b.T;
  dec_in_.mask = or_null(b.decoder_mask);
  dec_in_.memory = memory;
  dec_in_.memory_mask = enc_in_.mask;
  dec_in_.S = b.S;
  dec_in_.memory_grad = &memory_grad_;
  return decoder_.forward(arena_, embed(b.decoder_tokens), dec_in_);
}

float T5Model::output_scale() const {
  // HF's scale_decoder_outputs: the factor d_model**-0.5 rounded to fp32.
  return opt_.scale_output ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg_.hidden_size))) : 1.0f;
}

Tensor T5Model::logits(const Tensor& h) {
  const int64_t N = h.size(0), C = cfg_.hidden_size;
  const Backend& be = backend_of(h);
  head_in_ = h;
  if (opt_.scale_output) {
    head_in_ = arena_.tensor(h.shape());
    head_in_.copy_from(h);
    be.scale_inplace(head_in_.data<float>(), output_scale(), N * C);
  }
  Tensor out = arena_.tensor({N, V_local_});  // x_s W^T, W this rank's rows of the output matrix
  head_.logits(arena_, head_in_, out);
  return out;
}

double T5Model::head_loss(const T5Batch& b, Tensor& lg, float grad_scale, Tensor* dh) {
  const int64_t N = lg.size(0), C = cfg_.hidden_size, Vl = V_local_;
  const Backend& be = backend_of(lg);
  CrossEntropyArgs a;
  a.logits = lg.data<float>();
  a.dlogits = dh ? lg.data<float>() : nullptr;
  a.targets = b.labels.data();
  a.ignore_index = kIgnoreIndex;
  a.grad_scale = grad_scale;
  a.N = N;
  a.Vl = Vl;
  a.vocab_start = vocab_start_;
  a.V = cfg_.vocab_size;
  const double loss = vocab_parallel_cross_entropy(be, arena_, ctx_, a);
  if (!dh) return loss;
  // dW [Vl, C] += dlogits^T x_s (tied: added to what the embedding's backward adds); dh = dlogits W,
  // this rank's columns' part, summed over tp.
  head_.backward(arena_, head_in_, lg, *dh);
  tp_all_reduce_sum(ctx_, dh->data<float>(), N * C, dh->device());
  if (opt_.scale_output) be.scale_inplace(dh->data<float>(), output_scale(), N * C);
  return loss;
}

Tensor T5Model::forward_logits(const T5Batch& b) {
  check(b, false);
  arena_.reset();
  return gather_vocab_shards(arena_, ctx_, logits(decode(b)), cfg_.vocab_size);
}

double T5Model::forward_loss(const T5Batch& b) {
  check(b, true);
  arena_.reset();
  Tensor lg = logits(decode(b));
  const double loss = head_loss(b, lg, 1.0f, nullptr);
  arena_.reset();
  return loss;
}

double T5Model::forward_backward(const T5Batch& b, float grad_scale) {
  check(b, true);
  arena_.reset();
  const Tensor h = decode(b);
  Tensor lg = logits(h);
  Tensor dh = arena_.tensor(h.shape()), dx = arena_.tensor(h.shape());
  const double loss = head_loss(b, lg, grad_scale, &dh);
  decoder_.backward(arena_, dh, dx);  // adds the memory's gradient to memory_grad_
  embed_backward(b.decoder_tokens, dx);
  Tensor dxe = arena_.tensor(memory_grad_.shape());
  encoder_.backward(arena_, memory_grad_, dxe);
  embed_backward(b.encoder_tokens, dxe);
  arena_.reset();
  return loss;
}

void T5Model::start_generation(const std::vector<int32_t>& encoder_tokens, const std::vector<int32_t>& encoder_mask,
                               int64_t B, int64_t S, int64_t steps, T5DecoderCache& cache) {
  // The encoder's half of a batch: no decoder rows, checked as one.
  T5Batch b;
  b.B = B;
  b.S = S;
  b.T = 1;
  b.encoder_tokens = encoder_tokens;
  b.encoder_mask = encoder_mask;
  b.decoder_tokens.assign(static_cast<size_t>(B), 0);
  check(b, false);
  MEGADLM_CHECK(steps >= 1, "T5 generation: room for ", steps, " decoder rows");
  arena_.reset();
  enc_in_ = T5StackInputs{};
  enc_in_.B = B;
  enc_in_.T = S;
  enc_in_.mask = encoder_mask.empty() ? nullptr : encoder_mask.data();
  const Tensor memory = encoder_.forward(arena_, embed(encoder_tokens), enc_in_);
  decoder_.start_decoding(arena_, memory, enc_in_.mask, B, S, steps, cache);
  arena_.reset();
}

Tensor T5Model::decode_step_logits(const std::vector<int32_t>& tokens, T5DecoderCache& cache) {
  MEGADLM_CHECK(static_cast<int64_t>(tokens.size()) == cache.B, "T5 generation: ", tokens.size(), " tokens for ",
                cache.B, " sequences");
  for (size_t i = 0; i < tokens.size(); ++i)
    MEGADLM_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "T5 generation: decoder token ", tokens[i], " at ", i,
                  " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
  arena_.reset();
  const Tensor h = decoder_.decode_step(arena_, embed(tokens), cache);
  return gather_vocab_shards(arena_, ctx_, logits(h), cfg_.vocab_size);
}

}  // namespace megadlm
