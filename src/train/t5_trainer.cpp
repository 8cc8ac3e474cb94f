#include "train/t5_trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/types.h"
#include "models/t5_options_json.h"

namespace megadlm {

double t5_flops_per_sample(const TransformerConfig& cfg, const T5Options& opt, int64_t S, int64_t T) {
  const double C = static_cast<double>(cfg.hidden_size), HD = static_cast<double>(cfg.num_attention_heads * cfg.kv_channels);
  const double F = static_cast<double>(cfg.ffn_hidden_size) * (opt.feed_forward == T5FeedForward::Relu ? 2 : 3);
  const double Le = static_cast<double>(cfg.num_layers), Ld = static_cast<double>(opt.num_decoder_layers);
  const double s = static_cast<double>(S), t = static_cast<double>(T), V = static_cast<double>(cfg.vocab_size);
  const double encoder = s * Le * (4 * C * HD + C * F + 2 * s * HD);
  const double decoder = t * (Ld * (6 * C * HD + C * F + 2 * t * HD + 2 * s * HD) + C * V) + s * Ld * 2 * C * HD;
  return 6 * (encoder + decoder);
}

T5Trainer::T5Trainer(const TrainArgs& args) : FamilyTrainer(args, "t5") {
  tokens_ = t5_tokens_for(*tokenizer_, args_.t5.vocab_extra_ids);
  // The tokenizer's vocabulary with the added ids, unpadded (as BERT's): no padded logit rows to mask.
  args_.model.vocab_size = tokenizer_->vocab_size();
  args_.model.real_vocab_size = 0;
  build_splits([this](std::shared_ptr<const IndexedDataset> data, SequenceRange documents, Split split, int64_t n) {
    auto& d = split == Split::Train ? train_ : valid_;
    d = std::make_unique<T5Dataset>(std::move(data), documents, split, t5_dataset_config(args_, tokens_, n));
    return d->size();
  });
  make_groups();
  model_ = std::make_unique<T5Model>(args_.model, args_.t5.options, parallel_->context());
  MixedPrecision* precision = apply_precision(*model_);
  start(model_->params(), [cfg = args_.model, opt = args_.t5.options](const ParallelContext& ctx) {
    auto m = std::make_shared<T5Model>(cfg, opt, ctx);
    return std::shared_ptr<ParamStore>(m, &m->params());
  }, precision);
}

T5Trainer::~T5Trainer() = default;

// Megatron's T5 loss: each micro-batch's mean over its labelled decoder rows, so grad_scale is
// 1 / (labelled M) and the step's gradient that of the micro-batches' mean.
void T5Trainer::micro_batch(int64_t first, int64_t M, double* parts) {
  int64_t labelled = 0;
  const T5Batch batch = t5_batch_of(*train_, first, args_.micro_batch_size, &labelled, sample_);
  const double n = static_cast<double>(std::max<int64_t>(labelled, 1) * M);
  const double loss = model_->forward_backward(batch, static_cast<float>(1.0 / n));
  parts[0] += loss / n;
}

T5EvalResult T5Trainer::evaluate(const T5Dataset& data, int64_t batches) {
  return evaluate_t5(*model_, data, args_.micro_batch_size, batches);
}

void T5Trainer::evaluate_and_log(int64_t iteration) {
  const T5EvalResult e = evaluate(*valid_, args_.eval_iters);
  log_info("validation at iteration ", iteration, ": lm loss ", e.loss, " | lm ppl ", std::exp(e.loss));
  write_metrics({{"iteration", iteration}, {"val_loss", e.loss}, {"val_ppl", std::exp(e.loss)}});
}

void T5Trainer::log_header() const {
  const TransformerConfig& c = args_.model;
  const T5Options& o = args_.t5.options;
  log_info("MegaDLMs C++: t5 model, ", human_count(static_cast<double>(model_->params().numel())), " parameters (",
           c.num_layers, " + ", o.num_decoder_layers, " layers, hidden ", c.hidden_size, ", ", c.num_attention_heads,
           " heads of ", c.kv_channels, ", ffn ", c.ffn_hidden_size, " ", t5_feed_forward_name(o.feed_forward), ", vocab ",
           c.vocab_size, model_->tied() ? ", tied" : ", untied", " output",
           o.scale_output ? " scaled by d_model^-0.5" : "", "); CPU, ", precision_text(), ", ", omp_get_max_threads(), " OpenMP threads a rank");
  log_info("batch: micro ", args_.micro_batch_size, " x (encoder ", args_.t5.encoder_seq_length, " + decoder ",
           args_.t5.decoder_seq_length, "), global ", args_.global_batch_size, " (",
           args_.global_batch_size / args_.micro_batch_size, " micro-batches per step); data: ", data_description_);
  log_info("objective: span corruption (--mask-prob ", args_.mask_prob, " noise density, mean span 3, ",
           tokens_.sentinels.size(), " sentinels), the mean CE over the labelled decoder rows");
}

double T5Trainer::flops_per_sample() const {
  return t5_flops_per_sample(args_.model, args_.t5.options, args_.t5.encoder_seq_length, args_.t5.decoder_seq_length);
}

// The "t5" object convert_checkpoint writes (models/t5_options_json.h) with the special ids, so that
// convert_checkpoint --to-hf exports the trained model; the data settings beside it.
void T5Trainer::add_checkpoint_meta(nlohmann::json& m) const {
  nlohmann::json t = t5_options_to_json(args_.t5.options);
  t["pad_token_id"] = tokens_.pad;
  t["eos_token_id"] = tokens_.eos;
  t["decoder_start_token_id"] = tokens_.bos;
  m["t5"] = t;
  m["encoder_seq_length"] = args_.t5.encoder_seq_length;
  m["decoder_seq_length"] = args_.t5.decoder_seq_length;
  m["vocab_extra_ids"] = args_.t5.vocab_extra_ids;
}

nlohmann::json T5Trainer::model_options() const { return t5_options_to_json(args_.t5.options); }

nlohmann::json T5Trainer::model_options_of(const nlohmann::json& meta) const {
  const nlohmann::json t = meta.value("t5", nlohmann::json::object());
  const nlohmann::json want = model_options();
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : want.items())
    if (t.contains(key)) out[key] = t[key];
  return out;
}

}  // namespace megadlm
