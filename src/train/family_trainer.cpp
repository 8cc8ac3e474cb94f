#include "train/family_trainer.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "kernels/backend.h"
#include "models/config_json.h"
#include "parallel/mpi_communicator.h"
#include "parallel/tp_mappings.h"
#include "train/data_setup.h"
#include "train/family_data.h"
#include "train/run_directories.h"

namespace megadlm {

FamilyTrainer::FamilyTrainer(const TrainArgs& args, std::string family)
    : args_(args), family_(std::move(family)), step_guard_(args.max_skipped_steps) {
  if (!args_.save.empty() && world_rank() == 0) prepare_save_dir(args_.save);
  if (!args_.load.empty()) check_load_path(args_.load);
  tokenizer_ = make_tokenizer(resolve_tokenizer_spec(args_));
  check_data_tokenizers(args_, *tokenizer_);
}

FamilyTrainer::~FamilyTrainer() = default;

void FamilyTrainer::make_groups() {
  parallel_ = std::make_unique<ParallelTraining>(args_.parallel, args_.model, args_.micro_batch_size,
                                                 args_.global_batch_size);
}

// The values do not depend on the layout (ParamStore::init draws by the full tensors' indices).
void FamilyTrainer::start(ParamStore& params, ParallelTraining::ParamsFactory make_params, MixedPrecision* precision) {
  params_ = &params;
  precision_ = precision;
  params.init(args_.seed);
  optimizer_ = std::make_unique<AdamW>(params, args_.adam);
  parallel_->adopt(*optimizer_);
  parallel_->attach(params, args_.adam, std::move(make_params), tied_embedding_copy());
  if (!args_.load.empty()) load();
  if (precision_) precision_->weights_updated();  // the initialised or loaded weights
  if (!args_.save.empty() && parallel_->writes_files()) {
    check_save_dir(args_.save, resumed_from_, iteration_, args_.finetune);
    metrics_ = std::make_unique<JsonlWriter>(args_.save + "/metrics.jsonl");
  }
  // The MFU against the peak of the products that run.
  peak_flops_ = cpu_backend().peak_gemm_flops(precision_ && precision_->bf16_gemm());
}

std::string FamilyTrainer::precision_text() const {
  std::string s = describe_precision(args_.precision.precision);
  if (!args_.precision.bf16_path_note.empty()) s += "; " + args_.precision.bf16_path_note;
  if (args_.precision.recompute.granularity != RecomputeGranularity::None)
    s += "; recompute " + describe_recompute(args_.precision.recompute);
  return s;
}

void FamilyTrainer::build_splits(const MakeSplit& make) {
  const std::string& prefix = args_.data_path.at(0);
  auto data = std::make_shared<const IndexedDataset>(prefix, tokenizer_->vocab_size());
  for (const FamilySplit& s : family_splits(args_, data->num_documents())) {
    const int64_t samples = make(data, s.documents, s.split, s.num_samples);
    if (s.split == Split::Train)
      data_description_ = prefix + ": train " + std::to_string(s.documents.size()) + " documents, " +
                          std::to_string(samples) + " samples";
    else
      data_description_ += "; valid " + std::to_string(s.documents.size()) + " documents";
  }
}

void FamilyTrainer::write_metrics(const nlohmann::json& j) {
  if (metrics_) metrics_->write(j);
}

nlohmann::json FamilyTrainer::checkpoint_meta() const {
  nlohmann::json m;
  m["model_type"] = family_;
  m["config"] = config_to_json(args_.model);
  m["tokenizer"] = tokenizer_->spec().to_json();
  m["tokenizer_vocab_size"] = tokenizer_->vocab_size();
  m["seed"] = args_.seed;
  m["mask_prob"] = args_.mask_prob;
  m["short_seq_prob"] = args_.short_seq_prob;
  m["micro_batch_size"] = args_.micro_batch_size;
  m["global_batch_size"] = args_.global_batch_size;
  add_checkpoint_meta(m);
  return m;
}

void FamilyTrainer::load() {
  const std::string dir = checkpoint_to_load(args_.load);
  if (dir.empty()) return;
  const CheckpointState st = read_checkpoint_state(dir);
  const std::string type = st.meta.value("model_type", "?");
  MEGADLM_CHECK(type == family_, dir, ": the checkpoint is a ", type, " model but --model-type is ", family_);
  nlohmann::json want = config_to_json(args_.model), got = st.meta.value("config", nlohmann::json::object());
  want.update(model_options());
  got.update(model_options_of(st.meta));
  const std::string diff = config_mismatch(want, got);
  MEGADLM_CHECK(diff.empty(), dir, ": the checkpoint does not match the model flags:", diff);
  if (parallel_->load_run_checkpoint(dir, st, *optimizer_, args_.finetune, args_.no_load_optim)) {
    iteration_ = st.iteration;
    consumed_samples_ = st.consumed_samples;
    resumed_from_ = dir;
  }
}

void FamilyTrainer::save(int64_t iteration) {
  CheckpointState st;
  st.iteration = iteration;
  st.consumed_samples = consumed_samples_;
  st.meta = checkpoint_meta();
  parallel_->save_run_checkpoint(args_.save, *params_, *optimizer_, st);
}

void FamilyTrainer::pipeline_micro_batches(const std::function<int64_t(int64_t)>&, int64_t, double*) {
  fail("--pipeline-model-parallel-size ", parallel_->context().pp.size,
       " is not available with --model-type ", family_);
}

// Data-parallel rank r takes micro-batches r, r + dp, r + 2 dp, ... of the global batch (rows
// [r B, (r+1) B) of each block of B dp samples, Megatron's sampler), M of them; the gradients' and
// the losses' data-parallel mean is then the global batch's.
FamilyTrainer::Step FamilyTrainer::train_step() {
  const int64_t B = args_.micro_batch_size, dp = parallel_->dp_size(), M = args_.global_batch_size / (B * dp);
  params_->zero_grads();
  Step step;
  step.parts.assign(loss_names().size(), 0.0);
  auto first = [&](int64_t m) { return static_cast<int64_t>(consumed_samples_) + (m * dp + parallel_->dp_rank()) * B; };
  if (parallel_->context().pp.size > 1) {
    pipeline_micro_batches(first, M, step.parts.data());
    parallel_->before_micro_batch(M - 1, M);  // after every backward: the reduction is not overlapped
  } else {
    for (int64_t m = 0; m < M; ++m) {
      parallel_->before_micro_batch(m, M);
      micro_batch(first(m), M, step.parts.data());
    }
  }
  parallel_->reduce_gradients();
  parallel_->sum_over_dp(step.parts.data(), static_cast<int>(step.parts.size()));
  double loss = 0;
  for (double& p : step.parts) {
    p /= static_cast<double>(dp);
    loss += p;
  }
  step.lr = args_.lr.at(iteration_ + 1);
  step.grad_norm = std::isfinite(loss) ? parallel_->grad_norm() : NAN;
  const StepSkip skip = classify_step(loss, step.grad_norm);
  // Under bf16 products AdamW writes the weights' bf16 copies on its pass where it can; the others are
  // remade at their next use.
  bool copies_written = false;
  if (skip == StepSkip::None)
    copies_written = parallel_->apply(*optimizer_, step.lr, step.grad_norm,
                                      precision_ ? precision_->bf16_copy_targets() : std::vector<uint16_t*>{});
  if (precision_) precision_->weights_updated(copies_written);
  step_guard_.record(skip, iteration_ + 1, loss, step.grad_norm);
  consumed_samples_ += static_cast<uint64_t>(args_.global_batch_size);
  ++iteration_;
  return step;
}

// Trainer's line with the family's losses after the total.
void FamilyTrainer::log_interval(const Step& last, Interval& interval) {
  const double secs = interval.timer.seconds();
  const double steps = static_cast<double>(interval.steps);
  const double samples_per_s = static_cast<double>(args_.global_batch_size) * steps / secs;
  const double tps = samples_per_s * static_cast<double>(tokens_per_sample());
  // Every rank's samples against one rank's peak.
  const double mfu = peak_flops_ > 0 ? samples_per_s * flops_per_sample() / (peak_flops_ * parallel_->context().world_size) : 0;
  const std::vector<std::string> names = loss_names();
  std::vector<double> parts(names.size());
  double loss = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i] = interval.parts[i] / steps;
    loss += parts[i];
  }
  const double consumed_tokens = static_cast<double>(consumed_samples_) * static_cast<double>(tokens_per_sample());
  char line[512];
  int n = std::snprintf(line, sizeof line, " iteration %8lld/%8lld | consumed tokens %12.0f | lr %.3E | loss %.4E",
                        static_cast<long long>(iteration_), static_cast<long long>(args_.train_iters), consumed_tokens,
                        last.lr, loss);
  for (size_t i = 0; i < parts.size(); ++i)
    n += std::snprintf(line + n, sizeof line - n, " | %s loss %.4E", names[i].c_str(), parts[i]);
  std::snprintf(line + n, sizeof line - n,
                " | grad norm %.3f | tokens/s %.0f | MFU %.1f%% | step time %.1f ms | skipped %lld", last.grad_norm, tps,
                100.0 * mfu, 1000.0 * secs / steps, static_cast<long long>(step_guard_.total()));
  log_line(line);
  nlohmann::json j = {{"iteration", iteration_},
                      {"consumed_tokens", consumed_tokens},
                      {"lr", last.lr},
                      {"loss", loss},
                      {"grad_norm", std::isfinite(last.grad_norm) ? last.grad_norm : -1.0},
                      {"tokens_per_s", tps},
                      {"mfu", mfu},
                      {"step_time_s", secs / steps},
                      {"skipped_steps", step_guard_.total()}};
  for (size_t i = 0; i < parts.size(); ++i) j[names[i] + "_loss"] = parts[i];
  write_metrics(j);
  interval = Interval();
}

bool FamilyTrainer::save_or_exit(const Timer& run_timer) {
  const bool exit_now = (args_.exit_interval > 0 && iteration_ % args_.exit_interval == 0) ||
                        (args_.exit_duration_in_mins > 0 && run_timer.seconds() > 60.0 * args_.exit_duration_in_mins);
  if (!args_.save.empty() && ((args_.save_interval > 0 && iteration_ % args_.save_interval == 0) ||
                              iteration_ == args_.train_iters || exit_now))
    save(iteration_);
  if (exit_now) log_info("exiting at iteration ", iteration_, " (--exit-interval / --exit-duration-in-mins)");
  return exit_now;
}

int64_t FamilyTrainer::run() {
  log_header();
  const ParallelContext& ctx = parallel_->context();
  log_info("layout: ", ctx.world_size, " ranks = tp ", ctx.tp.size, " x pp ", ctx.pp.size, " x dp ", ctx.dp.size,
           sequence_parallel(ctx) ? ", sequence parallel" : "",
           parallel_->distributed_optimizer() ? ", distributed optimizer" : "");
  Timer run_timer;
  if (iteration_ == 0 && has_validation()) evaluate_and_log(0);
  Interval interval;
  while (iteration_ < args_.train_iters) {
    const Step step = train_step();
    interval.parts.resize(step.parts.size(), 0.0);
    for (size_t i = 0; i < step.parts.size(); ++i) interval.parts[i] += step.parts[i];
    ++interval.steps;
    if (iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters) log_interval(step, interval);
    if (has_validation() && iteration_ % args_.eval_interval == 0) {
      evaluate_and_log(iteration_);
      interval.timer.reset();
    }
    if (save_or_exit(run_timer)) break;
  }
  return iteration_;
}

}  // namespace megadlm
