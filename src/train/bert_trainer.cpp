#include "train/bert_trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "checkpoint/native_checkpoint.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "models/config_json.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tp_mappings.h"
#include "train/data_setup.h"
#include "train/run_directories.h"

namespace megadlm {

namespace {

// Megatron's BERT: pre-norm (no embedding norm, a final norm), GELU with the erf.
BertOptions bert_options(const TrainArgs& args) {
  BertOptions o;
  o.pre_norm = true;
  o.binary_head = args.bert_binary_head;
  return o;
}

// The WordPiece ids BERT's samples need; another tokenizer is an Error naming --tokenizer-type.
BertTokens bert_tokens_for(const Tokenizer& tok) {
  try {
    return bert_tokens_of(tok);
  } catch (const Error& e) {
    fail("--tokenizer-type ", tok.spec().type, ": --model-type bert needs BERT's WordPiece tokenizer ",
         "(BertWordPieceLowerCase or BertWordPieceCase with --vocab-file): ", e.what());
  }
}

}  // namespace

BertTrainer::BertTrainer(const TrainArgs& args) : args_(args), step_guard_(args.max_skipped_steps) {
  if (!args_.save.empty() && world_rank() == 0) prepare_save_dir(args_.save);
  if (!args_.load.empty()) check_load_path(args_.load);
  tokenizer_ = make_tokenizer(resolve_tokenizer_spec(args_));
  check_data_tokenizers(args_, *tokenizer_);
  tokens_ = bert_tokens_for(*tokenizer_);
  // The tokenizer's vocabulary exactly, as HuggingFace's BERT: the MLM head has no padded rows to mask.
  args_.model.vocab_size = tokenizer_->vocab_size();
  args_.model.real_vocab_size = 0;
  build_datasets();
  const ModelSpec spec = bert_model_spec(args_.model, bert_options(args_));
  // The groups (collective over the world), then this rank's part of the model: its values do not
  // depend on the layout (ParamStore::init draws by the full tensors' indices).
  parallel_ = std::make_unique<ParallelTraining>(args_.parallel, args_.model, args_.micro_batch_size,
                                                 args_.global_batch_size);
  model_ = std::make_unique<BertModel>(args_.model, spec, parallel_->context());
  model_->params().init(args_.seed);
  optimizer_ = std::make_unique<AdamW>(model_->params(), args_.adam);
  parallel_->adopt(*optimizer_);
  parallel_->attach(model_->params(), args_.adam, [cfg = args_.model, spec](const ParallelContext& ctx) {
    auto m = std::make_shared<BertModel>(cfg, spec, ctx);
    return std::shared_ptr<ParamStore>(m, &m->params());
  });
  if (!args_.load.empty()) load();
  if (!args_.save.empty() && parallel_->writes_files()) {
    check_save_dir(args_.save, resumed_from_, iteration_, args_.finetune);
    metrics_ = std::make_unique<JsonlWriter>(args_.save + "/metrics.jsonl");
  }
  peak_flops_ = cpu_backend().peak_gemm_flops(false);
}

BertTrainer::~BertTrainer() = default;

BertDatasetConfig BertTrainer::dataset_config(int64_t num_samples) const {
  BertDatasetConfig c;
  c.seq_length = args_.seq_length;
  c.num_samples = num_samples;
  c.seed = args_.seed;
  c.mask_prob = args_.mask_prob;
  c.short_seq_prob = args_.short_seq_prob;
  c.binary_head = args_.bert_binary_head;
  c.tokens = tokens_;
  return c;
}

// Megatron splits BERT data by documents; the validation split holds what --eval-iters reads.
void BertTrainer::build_datasets() {
  const std::string& prefix = args_.data_path.at(0);
  auto data = std::make_shared<const IndexedDataset>(prefix, tokenizer_->vocab_size());
  const auto ranges = split_ranges(args_.split, data->num_documents());
  MEGADLM_CHECK(ranges[0].has_value(), "--split ", args_.split, ": the train split is empty");
  train_ = std::make_unique<BertDataset>(data, *ranges[0], Split::Train,
                                         dataset_config(args_.train_iters * args_.global_batch_size));
  data_description_ = prefix + ": train " + std::to_string(ranges[0]->size()) + " documents, " +
                      std::to_string(train_->size()) + " samples (" + std::to_string(train_->num_epochs()) + " epochs)";
  if (ranges[1] && args_.eval_iters > 0 && args_.eval_interval > 0) {
    valid_ = std::make_unique<BertDataset>(data, *ranges[1], Split::Valid,
                                           dataset_config(args_.eval_iters * args_.micro_batch_size));
    data_description_ += "; valid " + std::to_string(ranges[1]->size()) + " documents";
  }
}

BertBatch BertTrainer::batch_of(const BertDataset& data, int64_t first, int64_t B) {
  BertBatch b;
  b.B = B;
  b.T = args_.seq_length;
  for (int64_t i = 0; i < B; ++i) {
    data.sample((first + i) % data.size(), sample_);
    b.tokens.insert(b.tokens.end(), sample_.tokens.begin(), sample_.tokens.end());
    b.token_types.insert(b.token_types.end(), sample_.token_types.begin(), sample_.token_types.end());
    b.mlm_labels.insert(b.mlm_labels.end(), sample_.labels.begin(), sample_.labels.end());
    b.attention_mask.insert(b.attention_mask.end(), sample_.padding_mask.begin(), sample_.padding_mask.end());
    if (args_.bert_binary_head) b.binary_labels.push_back(sample_.is_random);
  }
  return b;
}

nlohmann::json BertTrainer::checkpoint_meta() const {
  nlohmann::json m;
  m["model_type"] = "bert";
  m["config"] = config_to_json(args_.model);
  m["bert_pre_norm"] = true;
  m["bert_binary_head"] = args_.bert_binary_head;
  m["tokenizer"] = tokenizer_->spec().to_json();
  m["tokenizer_vocab_size"] = tokenizer_->vocab_size();
  m["seq_length"] = args_.seq_length;
  m["seed"] = args_.seed;
  m["mask_prob"] = args_.mask_prob;
  m["short_seq_prob"] = args_.short_seq_prob;
  m["micro_batch_size"] = args_.micro_batch_size;
  m["global_batch_size"] = args_.global_batch_size;
  return m;
}

void BertTrainer::load() {
  const std::string dir = checkpoint_to_load(args_.load);
  if (dir.empty()) return;
  const CheckpointState st = read_checkpoint_state(dir);
  const std::string type = st.meta.value("model_type", "?");
  MEGADLM_CHECK(type == "bert", dir, ": the checkpoint is a ", type, " model but --model-type is bert");
  nlohmann::json want = config_to_json(args_.model), got = st.meta.value("config", nlohmann::json::object());
  want["bert_binary_head"] = args_.bert_binary_head;
  got["bert_binary_head"] = st.meta.value("bert_binary_head", true);
  const std::string diff = config_mismatch(want, got);
  MEGADLM_CHECK(diff.empty(), dir, ": the checkpoint does not match the model flags:", diff);
  // Any layout: each rank takes its piece of the full tensors (train/parallel_training.h).
  parallel_->load_checkpoint(dir, args_.finetune || args_.no_load_optim ? nullptr : optimizer_.get());
  if (!args_.finetune) {
    iteration_ = st.iteration;
    consumed_samples_ = st.consumed_samples;
    resumed_from_ = dir;
  }
  log_loaded(dir, st, args_.finetune);
}

void BertTrainer::save(int64_t iteration) {
  check_finite_before_save(model_->params(), optimizer_.get(), iteration, args_.save);
  CheckpointState st;
  st.iteration = iteration;
  st.consumed_samples = consumed_samples_;
  st.meta = checkpoint_meta();
  Timer t;
  // Collective: every rank takes part, rank 0 writes the full tensors whatever the layout.
  const std::string dir = parallel_->save_checkpoint(args_.save, *optimizer_, st);
  if (dir.empty()) return;
  log_info("saved checkpoint ", dir, " in ", t.seconds(), " s");
}

// Each micro-batch's MLM loss is its mean over its masked tokens and its sentence-order loss the mean
// over its sequences (Megatron's BERT loss); the step's loss is their mean over the global batch's
// micro-batches. Data-parallel rank r takes micro-batches r, r + dp, r + 2 dp, ... of the global
// batch (rows [r B, (r+1) B) of each block of B dp samples, Megatron's sampler), M of them; one
// grad_scale 1 / (B M) scales both heads, so each masked row weighs B / masked to give the mean, and
// the gradients' data-parallel mean is the global batch's.
BertTrainer::Step BertTrainer::train_step() {
  const int64_t B = args_.micro_batch_size, dp = parallel_->dp_size(), M = args_.global_batch_size / (B * dp);
  model_->params().zero_grads();
  Step step;
  for (int64_t m = 0; m < M; ++m) {
    const int64_t first = static_cast<int64_t>(consumed_samples_) + (m * dp + parallel_->dp_rank()) * B;
    BertBatch batch = batch_of(*train_, first, B);
    const auto masked = std::count_if(batch.mlm_labels.begin(), batch.mlm_labels.end(),
                                      [](int32_t l) { return l != kMlmIgnore; });
    batch.mlm_weights.assign(batch.mlm_labels.size(), static_cast<float>(B) / static_cast<float>(std::max<int64_t>(masked, 1)));
    parallel_->before_micro_batch(m, M);
    const BertLosses l = model_->forward_backward(batch, 1.0f / static_cast<float>(B * M));
    step.mlm += l.mlm / static_cast<double>(B * M);
    step.sop += l.binary / static_cast<double>(B * M);
  }
  parallel_->reduce_gradients();
  double losses[2] = {step.mlm, step.sop};
  parallel_->sum_over_dp(losses, 2);
  step.mlm = losses[0] / static_cast<double>(dp);
  step.sop = losses[1] / static_cast<double>(dp);
  step.lr = args_.lr.at(iteration_ + 1);
  const double loss = step.mlm + step.sop;
  step.grad_norm = std::isfinite(loss) ? parallel_->grad_norm() : NAN;
  const StepSkip skip = classify_step(loss, step.grad_norm);
  if (skip == StepSkip::None) parallel_->apply(*optimizer_, step.lr, step.grad_norm);
  step_guard_.record(skip, iteration_ + 1, loss, step.grad_norm);
  consumed_samples_ += static_cast<uint64_t>(args_.global_batch_size);
  ++iteration_;
  return step;
}

BertEvalResult BertTrainer::evaluate(const BertDataset& data, int64_t batches) {
  BertEvalResult r;
  const int64_t B = args_.micro_batch_size;
  batches = std::min(batches, data.size() / B);
  const int64_t V = args_.model.vocab_size;
  double masked = 0, correct = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const BertBatch batch = batch_of(data, i * B, B);
    BertModel::Logits logits;
    const BertLosses l = model_->forward_loss(batch, &logits);
    r.sop_loss += l.binary / static_cast<double>(B);
    const float* z = logits.mlm.data<float>();
    double batch_masked = 0;
    for (size_t n = 0; n < batch.mlm_labels.size(); ++n) {
      if (batch.mlm_labels[n] == kMlmIgnore) continue;
      const float* row = z + static_cast<int64_t>(n) * V;
      correct += static_cast<double>(std::max_element(row, row + V) - row == batch.mlm_labels[n]);
      ++batch_masked;
    }
    masked += batch_masked;
    r.mlm_loss += l.mlm / std::max(batch_masked, 1.0);
  }
  r.batches = batches;
  if (batches > 0) {
    r.mlm_loss /= static_cast<double>(batches);
    r.sop_loss /= static_cast<double>(batches);
  }
  r.mlm_accuracy = masked > 0 ? correct / masked : 0;
  return r;
}

void BertTrainer::evaluate_and_log(int64_t iteration) {
  const BertEvalResult e = evaluate(*valid_, args_.eval_iters);
  log_info("validation at iteration ", iteration, ": mlm loss ", e.mlm_loss, " | mlm accuracy ", e.mlm_accuracy,
           args_.bert_binary_head ? " | sop loss " + std::to_string(e.sop_loss) : std::string());
  if (!metrics_) return;
  nlohmann::json j = {{"iteration", iteration}, {"val_loss", e.mlm_loss}, {"val_ppl", std::exp(e.mlm_loss)},
                      {"val_mlm_accuracy", e.mlm_accuracy}};
  if (args_.bert_binary_head) j["val_sop_loss"] = e.sop_loss;
  metrics_->write(j);
}

// Trainer's line with the MLM and sentence-order losses after the total.
void BertTrainer::log_interval(const Step& last, Interval& interval) {
  const double secs = interval.timer.seconds();
  const double steps = static_cast<double>(interval.steps);
  const double tokens_per_step = static_cast<double>(args_.global_batch_size * args_.seq_length);
  const double tps = tokens_per_step * steps / secs;
  // tps counts every rank's tokens; the peak is one rank's.
  const double mfu = peak_flops_ > 0 ? tps * model_flops_per_token(args_.model, args_.seq_length) /
                                           (peak_flops_ * parallel_->context().world_size)
                                     : 0;
  const double mlm = interval.mlm / steps, sop = interval.sop / steps;
  const double consumed_tokens = static_cast<double>(consumed_samples_) * static_cast<double>(args_.seq_length);
  char line[512];
  int n = std::snprintf(line, sizeof line, " iteration %8lld/%8lld | consumed tokens %12.0f | lr %.3E | loss %.4E | mlm loss %.4E",
                        static_cast<long long>(iteration_), static_cast<long long>(args_.train_iters), consumed_tokens,
                        last.lr, mlm + sop, mlm);
  if (args_.bert_binary_head) n += std::snprintf(line + n, sizeof line - n, " | sop loss %.4E", sop);
  std::snprintf(line + n, sizeof line - n,
                " | grad norm %.3f | tokens/s %.0f | MFU %.1f%% | step time %.1f ms | skipped %lld", last.grad_norm, tps,
                100.0 * mfu, 1000.0 * secs / steps, static_cast<long long>(step_guard_.total()));
  log_line(line);
  if (metrics_) {
    nlohmann::json j = {{"iteration", iteration_},
                        {"consumed_tokens", consumed_tokens},
                        {"lr", last.lr},
                        {"loss", mlm + sop},
                        {"mlm_loss", mlm},
                        {"grad_norm", std::isfinite(last.grad_norm) ? last.grad_norm : -1.0},
                        {"tokens_per_s", tps},
                        {"mfu", mfu},
                        {"step_time_s", secs / steps},
                        {"skipped_steps", step_guard_.total()}};
    if (args_.bert_binary_head) j["sop_loss"] = sop;
    metrics_->write(j);
  }
  interval = Interval();
}

bool BertTrainer::save_or_exit(const Timer& run_timer) {
  const bool exit_now = (args_.exit_interval > 0 && iteration_ % args_.exit_interval == 0) ||
                        (args_.exit_duration_in_mins > 0 && run_timer.seconds() > 60.0 * args_.exit_duration_in_mins);
  if (!args_.save.empty() && ((args_.save_interval > 0 && iteration_ % args_.save_interval == 0) ||
                              iteration_ == args_.train_iters || exit_now))
    save(iteration_);
  if (exit_now) log_info("exiting at iteration ", iteration_, " (--exit-interval / --exit-duration-in-mins)");
  return exit_now;
}

int64_t BertTrainer::run() {
  const TransformerConfig& c = args_.model;
  log_info("MegaDLMs C++: bert model, ", human_count(static_cast<double>(model_->params().numel())), " parameters (",
           c.num_layers, " layers, hidden ", c.hidden_size, ", ", c.num_attention_heads, " heads, ffn ",
           c.ffn_hidden_size, ", vocab ", c.vocab_size, args_.bert_binary_head ? ", binary head" : ", no binary head",
           "); CPU, fp32, ", omp_get_max_threads(), " OpenMP threads a rank");
  const ParallelContext& ctx = parallel_->context();
  log_info("layout: ", ctx.world_size, " ranks = tp ", ctx.tp.size, " x dp ", ctx.dp.size,
           sequence_parallel(ctx) ? ", sequence parallel" : "",
           parallel_->distributed_optimizer() ? ", distributed optimizer" : "");
  log_info("batch: micro ", args_.micro_batch_size, " x seq ", args_.seq_length, ", global ", args_.global_batch_size,
           " (", args_.global_batch_size / args_.micro_batch_size, " micro-batches per step); data: ", data_description_);
  log_info("objective: MLM (--mask-prob ", args_.mask_prob, ")", args_.bert_binary_head ? " + sentence order" : "");
  Timer run_timer;
  if (iteration_ == 0 && valid_) evaluate_and_log(0);
  Interval interval;
  while (iteration_ < args_.train_iters) {
    const Step step = train_step();
    interval.mlm += step.mlm;
    interval.sop += step.sop;
    ++interval.steps;
    if (iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters) log_interval(step, interval);
    if (valid_ && iteration_ % args_.eval_interval == 0) {
      evaluate_and_log(iteration_);
      interval.timer.reset();
    }
    if (save_or_exit(run_timer)) break;
  }
  return iteration_;
}

}  // namespace megadlm
