#include "train/bert_trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "train/data_setup.h"
#include "train/family_data.h"
#include "train/pipeline_schedule.h"

namespace megadlm {

namespace {

// Megatron's BERT: pre-norm (no embedding norm, a final norm), GELU with the erf.
BertOptions bert_options(const TrainArgs& args) {
  BertOptions o;
  o.pre_norm = true;
  o.binary_head = args.bert_binary_head;
  return o;
}

}  // namespace

BertTrainer::BertTrainer(const TrainArgs& args) : FamilyTrainer(args, "bert") {
  tokens_ = bert_tokens_for(*tokenizer_);
  // The tokenizer's vocabulary exactly, as HuggingFace's BERT: the MLM head has no padded rows to mask.
  args_.model.vocab_size = tokenizer_->vocab_size();
  args_.model.real_vocab_size = 0;
  build_datasets();
  const ModelSpec spec = bert_model_spec(args_.model, bert_options(args_));
  make_groups();
  model_ = std::make_unique<BertModel>(args_.model, spec, parallel_->context());
  MixedPrecision* precision = apply_precision(*model_);
  start(model_->params(), [cfg = args_.model, spec](const ParallelContext& ctx) {
    auto m = std::make_shared<BertModel>(cfg, spec, ctx);
    return std::shared_ptr<ParamStore>(m, &m->params());
  }, precision);
}

BertTrainer::~BertTrainer() = default;

void BertTrainer::build_datasets() {
  build_splits([this](std::shared_ptr<const IndexedDataset> data, SequenceRange documents, Split split, int64_t n) {
    auto& d = split == Split::Train ? train_ : valid_;
    d = std::make_unique<BertDataset>(std::move(data), documents, split, bert_dataset_config(args_, tokens_, n));
    return d->size();
  });
}

void BertTrainer::add_checkpoint_meta(nlohmann::json& m) const {
  m["bert_pre_norm"] = true;
  m["bert_binary_head"] = args_.bert_binary_head;
  m["seq_length"] = args_.seq_length;
}

nlohmann::json BertTrainer::model_options() const { return {{"bert_binary_head", args_.bert_binary_head}}; }

nlohmann::json BertTrainer::model_options_of(const nlohmann::json& meta) const {
  return {{"bert_binary_head", meta.value("bert_binary_head", true)}};
}

std::vector<std::string> BertTrainer::loss_names() const {
  if (args_.bert_binary_head) return {"mlm", "sop"};
  return {"mlm"};
}

double BertTrainer::flops_per_sample() const {
  return model_flops_per_token(args_.model, args_.seq_length) * static_cast<double>(args_.seq_length);
}

// Each micro-batch's MLM loss is its mean over its masked tokens and its sentence-order loss the mean
// over its sequences (Megatron's BERT loss); the step's loss is their mean over the global batch's
// micro-batches. One grad_scale 1 / (B M) scales both heads, so each masked row weighs B / masked to
// give the mean.
BertBatch BertTrainer::training_batch(int64_t first) {
  const int64_t B = args_.micro_batch_size;
  BertBatch batch = bert_batch_of(*train_, first, B, args_.bert_binary_head, sample_);
  const auto masked = std::count_if(batch.mlm_labels.begin(), batch.mlm_labels.end(),
                                    [](int32_t l) { return l != kMlmIgnore; });
  batch.mlm_weights.assign(batch.mlm_labels.size(), static_cast<float>(B) / static_cast<float>(std::max<int64_t>(masked, 1)));
  return batch;
}

void BertTrainer::add_parts(const BertLosses& l, int64_t M, double* parts) const {
  const double BM = static_cast<double>(args_.micro_batch_size * M);
  parts[0] += l.mlm / BM;
  if (args_.bert_binary_head) parts[1] += l.binary / BM;
}

void BertTrainer::micro_batch(int64_t first, int64_t M, double* parts) {
  const BertLosses l = model_->forward_backward(training_batch(first), 1.0f / static_cast<float>(args_.micro_batch_size * M));
  add_parts(l, M, parts);
}

// Every stage reads every micro-batch (the tokens for the first stage, the padding for the attention
// of all, the labels for the last); the losses come from the last stage.
void BertTrainer::pipeline_micro_batches(const std::function<int64_t(int64_t)>& first, int64_t M, double* parts) {
  const ParallelContext& ctx = parallel_->context();
  pipeline_1f1b_step(*model_, ctx, M,
                     [&](int64_t m, MicroBatch& mb) { BertModel::micro_batch_of(training_batch(first(m)), mb); },
                     1.0f / static_cast<float>(args_.micro_batch_size * M));
  const int n = static_cast<int>(loss_names().size());
  std::vector<double> step(static_cast<size_t>(n), 0.0);
  for (const BertLosses& l : model_->take_stage_losses()) add_parts(l, M, step.data());
  broadcast_from_last_stage(ctx, step.data(), n);
  for (int i = 0; i < n; ++i) parts[i] += step[static_cast<size_t>(i)];
}

int BertTrainer::tied_embedding_copy() const {
  return model_->is_first_stage() ? -1 : model_->shared_embedding_id();
}

BertEvalResult BertTrainer::evaluate(const BertDataset& data, int64_t batches) {
  return evaluate_bert(*model_, data, args_.micro_batch_size, batches, args_.bert_binary_head);
}

void BertTrainer::evaluate_and_log(int64_t iteration) {
  const BertEvalResult e = evaluate(*valid_, args_.eval_iters);
  log_info("validation at iteration ", iteration, ": mlm loss ", e.mlm_loss, " | mlm accuracy ", e.mlm_accuracy,
           args_.bert_binary_head ? " | sop loss " + std::to_string(e.sop_loss) : std::string());
  nlohmann::json j = {{"iteration", iteration}, {"val_loss", e.mlm_loss}, {"val_ppl", std::exp(e.mlm_loss)},
                      {"val_mlm_accuracy", e.mlm_accuracy}};
  if (args_.bert_binary_head) j["val_sop_loss"] = e.sop_loss;
  write_metrics(j);
}

void BertTrainer::log_header() const {
  const TransformerConfig& c = args_.model;
  log_info("MegaDLMs C++: bert model, ", human_count(static_cast<double>(model_->params().numel())), " parameters (",
           c.num_layers, " layers, hidden ", c.hidden_size, ", ", c.num_attention_heads, " heads, ffn ",
           c.ffn_hidden_size, ", vocab ", c.vocab_size, args_.bert_binary_head ? ", binary head" : ", no binary head",
           "); CPU, ", precision_text(), ", ", omp_get_max_threads(), " OpenMP threads a rank");
  log_info("batch: micro ", args_.micro_batch_size, " x seq ", args_.seq_length, ", global ", args_.global_batch_size,
           " (", args_.global_batch_size / args_.micro_batch_size, " micro-batches per step); data: ", data_description_);
  log_info("objective: MLM (--mask-prob ", args_.mask_prob, ")", args_.bert_binary_head ? " + sentence order" : "");
}

}  // namespace megadlm
