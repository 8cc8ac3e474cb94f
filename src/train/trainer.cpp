#include "train/trainer.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint/native_checkpoint.h"
#include "core/file_io.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "kernels/dispatch.h"
#include "models/config_json.h"
#include "models/context_parallel.h"
#include "models/llava_model.h"
#include "data/llava_dataset.h"
#include "parallel/mpi_communicator.h"
#include "train/hf_init.h"
#include "train/moe_arguments.h"
#include "train/moe_metrics.h"
#include "train/pipeline_schedule.h"
#include "train/run_directories.h"

namespace megadlm {

namespace {

// The decoder families, whose checkpoints hold the same parameters whatever the objective.
bool is_decoder_type(const std::string& name) { return name == "gpt" || name == "difflm"; }

// The model's LLaVA tower and projector: null for a text model, and on a pipeline stage after the first.
LlavaVision* vision_of(LanguageModel& model) { return dynamic_cast<LlavaVision*>(model.inserts()); }

}  // namespace

Trainer::Trainer(const TrainArgs& args)
    : args_(args), exit_signals_(args.exit_signal_handler, args.exit_signal), step_guard_(args.max_skipped_steps) {
  if (args_.device != Device::CPU) {
    try {
      gpu_index_ = select_device(args_.device, local_rank());  // one GPU per rank of a node
      backend_for(args_.device);  // a build without CUDA, or no GPU visible
    } catch (const Error& e) {
      fail("--device ", device_name(args_.device), ": ", e.what());
    }
  }
  if (!args_.save.empty() && world_rank() == 0) prepare_save_dir(args_.save);
  if (!args_.load.empty()) check_load_path(args_.load);
  // Tokenizer, mask token and vocabulary.
  tokenizer_ = make_tokenizer(resolve_tokenizer_spec(args_));
  eod_ = tokenizer_->eod();
  check_data_tokenizers(args_, *tokenizer_);
  if (args_.model_type == ModelType::DiffLM) mask_token_ = resolve_mask_token(args_.mask_token, *tokenizer_);
  // Padded to --make-vocab-size-divisible-by alone, so that every layout trains the same model (the
  // vocabulary splits unevenly over tp: nn/embedding.h), the padded rows kept out of the softmax
  // (nn/lm_head.h). From --load-hf the checkpoint's vocabulary, grown only for ids it lacks (an
  // appended mask token), every row a token as in transformers.
  args_.model.vocab_size = args_.load_hf.empty()
                               ? padded_vocab_size(tokenizer_->vocab_size(), args_.make_vocab_size_divisible_by)
                               : hf_adapted_vocab_size(args_.model.vocab_size, tokenizer_->vocab_size());
  args_.model.real_vocab_size = args_.load_hf.empty() ? tokenizer_->vocab_size() : 0;
  args_.diffusion.mask_token = mask_token_;
  args_.diffusion.eod = eod_;
  if (args_.llava.enabled) {
    args_.llava.options.image_token = llava_image_token(args_);
    image_processor_ = clip_image_config_json(llava_image_processor(args_));
  }
  objective_ = make_objective(args_);
  eval_objective_ = objective_->for_evaluation();

  // Refuse a model that cannot fit before allocating anything large.
  validate_config(args_.model);
  const int64_t params = parameter_count(args_.model);
  // A context-parallel rank holds T / cp rows of each sequence; block diffusion's layout [x_t ; x_0] 2T.
  MemoryOptions mem_options = memory_options(args_.precision);
  mem_options.context_parallel = args_.parallel.layout.cp;
  const int64_t rows = args_.seq_length * (args_.model.block_diffusion ? 2 : 1);
  memory_ = estimate_memory(args_.model, params, args_.micro_batch_size, rows / args_.parallel.layout.cp, mem_options);
  const MemoryEstimate& mem = memory_;
  // The host's memory bounds a CPU run; a GPU run's device memory is not estimated here.
  const double avail = args_.device == Device::CPU ? available_host_memory_bytes() : 0.0;
  MEGADLM_CHECK(avail <= 0 || mem.total() < 0.9 * avail, "the model does not fit in memory: it needs about ",
                human_bytes(mem.total()), " (", human_count(static_cast<double>(params)), " parameters: ",
                human_bytes(mem.params_bytes), " for weights, gradients and AdamW state; ", human_bytes(mem.activations_bytes),
                " of activations at --micro-batch-size ", args_.micro_batch_size, " --seq-length ", args_.seq_length,
                ") but ", human_bytes(avail), " is available; use fewer or smaller layers, a shorter sequence or a smaller batch");

  // Data.
  const int64_t train_samples = args_.train_iters * args_.global_batch_size;
  data_ = build_datasets(args_, train_samples, args_.eval_iters * args_.micro_batch_size,
                         args_.eval_iters * args_.micro_batch_size);

  // Model and optimizer.
  const ModelSpec spec = model_spec(args_.model_type, args_.model);
  // The groups (collective over the world).
  parallel_ = std::make_unique<ParallelTraining>(args_.parallel, args_.model, args_.micro_batch_size,
                                                 args_.global_batch_size, args_.device);
  // Before the model is built, so that an unusable directory fails fast.
  if (args_.tensorboard.enabled() && parallel_->writes_files()) {
    tensorboard_ = std::make_unique<TensorBoardLog>(args_.tensorboard, args_.model.moe);
    log_info("TensorBoard: writing ", tensorboard_->path());
  }
  // On a device the parameters are drawn on the host (the same values as on the CPU) and uploaded.
  // The host twins of a device run (parallel_training.h) are built on the CPU.
  auto make_model = [cfg = args_.model, spec, llava = args_.llava](const ParallelContext& ctx,
                                                                    Device device) -> std::unique_ptr<LanguageModel> {
    if (llava.enabled) return make_llava_model(cfg, spec, llava.options, ctx);
    return std::make_unique<LanguageModel>(cfg, spec, ctx, true, true, device);
  };
  model_ = make_model(parallel_->context(), args_.device);
  model_->params().init(args_.seed);
  if (!args_.load_hf.empty()) load_hf_into_model(args_.load_hf, *model_);
  precision_ = std::make_unique<PrecisionRuntime>(args_.precision, *model_);
  optimizer_ = std::make_unique<AdamW>(model_->params(), args_.adam);
  parallel_->adopt(*optimizer_);
  parallel_->attach(*model_, args_.adam, [make_model](const ParallelContext& ctx) { return make_model(ctx, Device::CPU); });
  if (args_.llava.enabled) freeze_llava_parts();
  if (!args_.load.empty()) load();
  if (!args_.save.empty() && parallel_->writes_files()) {
    check_save_dir();
    metrics_ = std::make_unique<JsonlWriter>(args_.save + "/metrics.jsonl");
  }
  // The peak of the products the run makes (bf16 ones under --bf16 with bf16 products), per rank: the
  // CPU's oneDNN rate or the device's (Backend::peak_gemm_flops; 0 where the backend measures none).
  // fp8 products (the precision policy says where they run) are measured against the bf16 rate (no
  // fp8 peak is timed).
  const MixedPrecision* policy = model_->precision();
  peak_is_bf16_ = bf16_products_on(args_.precision.precision) || (policy && policy->fp8_products());
  peak_flops_ = backend_for(args_.device).peak_gemm_flops(peak_is_bf16_);
}

Trainer::~Trainer() = default;

void Trainer::freeze_llava_parts() {
  LlavaVision* vision = vision_of(*model_);  // on the first pipeline stage only
  if (args_.llava.freeze_vision && vision) {
    vision->freeze_vision(true);
    parallel_->freeze(*optimizer_, vision->tower_params().first, vision->tower_params().second);
  }
  // The language model's parameters follow the tower's and the projector's (a later stage holds only them).
  if (args_.llava.freeze_language)
    parallel_->freeze(*optimizer_, vision ? vision->projector_params().second : 0, model_->params().count());
}

void Trainer::load_images(const TokenDataset& data, const SampleBatch& batch, MicroBatch& mb) {
  if (vision_of(*model_) == nullptr) return;
  const auto* llava = dynamic_cast<const LlavaDataset*>(&data);
  MEGADLM_CHECK(llava != nullptr, "--model-type llava: the dataset carries no images");
  mb.images = llava->batch_pixels(static_cast<int64_t>(batch.first_sample), batch.B, mb.pixels);
}

nlohmann::json Trainer::checkpoint_meta() const {
  nlohmann::json m;
  m["model_type"] = args_.llava.enabled ? "llava" : model_type_name(args_.model_type);
  if (args_.llava.enabled) {
    m["language_model_type"] = model_type_name(args_.model_type);
    m["llava"] = llava_to_json(args_.llava.options);
    m["image_processor"] = image_processor_;  // generate's and the HuggingFace export's
  }
  m["model_running_mode"] = args_.model_running_mode;
  m["config"] = config_to_json(args_.model);
  m["tokenizer"] = tokenizer_->spec().to_json();
  m["tokenizer_vocab_size"] = tokenizer_->vocab_size();
  m["mask_token"] = mask_token_;
  m["eod"] = eod_;
  m["seq_length"] = args_.seq_length;
  m["seed"] = args_.seed;
  m["micro_batch_size"] = args_.micro_batch_size;
  m["global_batch_size"] = args_.global_batch_size;
  if (args_.model.block_diffusion) m["dlm_eps"] = args_.diffusion.eps;  // evaluate's NELBO draws t from [eps, 1]
  return m;
}

void Trainer::load() {
  const std::string dir = checkpoint_to_load(args_.load);
  if (dir.empty()) return;
  const CheckpointState st = read_checkpoint_state(dir);
  const nlohmann::json want = config_to_json(args_.model);
  const nlohmann::json got = st.meta.value("config", nlohmann::json::object());
  // The model type first: it implies config differences (the attention mask) that would hide it. A LLaVA
  // checkpoint loads into a LLaVA run only, which compares its language model's type. --finetune may carry
  // gpt weights into difflm or back (AR-to-diffusion adaptation, as DiffuGPT and Dream start; for LLaVA,
  // Dimple's autoregressive-then-diffusion training): the same parameters, only the attention mask and
  // the token rows in use differ.
  const std::string ckpt_type = st.meta.value("model_type", "?");
  MEGADLM_CHECK(!args_.llava.enabled || ckpt_type == "llava", dir, ": the checkpoint is a ", ckpt_type,
                " model but --model-type is llava");
  const std::string ckpt_lm = args_.llava.enabled ? st.meta.value("language_model_type", "?") : ckpt_type;
  const std::string our_lm = model_type_name(args_.model_type);
  const bool decoders = is_decoder_type(ckpt_lm) && is_decoder_type(our_lm);
  const bool adapts = args_.finetune && ckpt_lm != our_lm && decoders;
  MEGADLM_CHECK(ckpt_lm == our_lm || adapts, dir,
                args_.llava.enabled ? ": the checkpoint's language model is " : ": the checkpoint is a ", ckpt_lm,
                args_.llava.enabled ? " but --language-model-type is " : " model but --model-type is ", our_lm,
                decoders ? " (add --finetune to start a new run from its weights: AR-to-diffusion adaptation)" : "");
  if (adapts)
    log_info("--finetune: adapting the ", ckpt_lm, " checkpoint into a ", our_lm, " model (same weights, ",
             want.value("attention_mask_type", "?"), " attention)");
  const std::string diff =
      config_mismatch(want, got,
                      adapts ? std::vector<std::string>{"attention_mask_type", "attention_block_size", "block_diffusion",
                                                        "real_vocab_size"}
                             : std::vector<std::string>{});
  MEGADLM_CHECK(diff.empty(), dir, ": the checkpoint does not match the model flags:", diff);
  if (args_.llava.enabled) {
    const std::string vdiff = config_mismatch(llava_to_json(args_.llava.options),
                                              st.meta.value("llava", nlohmann::json::object()), {});
    MEGADLM_CHECK(vdiff.empty(), dir, ": the checkpoint's vision tower and projector do not match the flags:", vdiff);
  }
  if (parallel_->load_run_checkpoint(dir, st, *optimizer_, args_.finetune, args_.no_load_optim)) {
    iteration_ = st.iteration;
    consumed_samples_ = st.consumed_samples;
    resumed_from_ = dir;
  }
}

void Trainer::check_save_dir() const { megadlm::check_save_dir(args_.save, resumed_from_, iteration_, args_.finetune); }

void Trainer::save(int64_t iteration) {
  CheckpointState st;
  st.iteration = iteration;
  st.consumed_samples = consumed_samples_;
  st.meta = checkpoint_meta();
  parallel_->save_run_checkpoint(args_.save, model_->params(), *optimizer_, st);
}

EvalResult Trainer::evaluate(const TokenDataset& data, int64_t batches) {
  EvalResult r;
  MicroBatch mb;
  const int64_t available = data.size() / args_.micro_batch_size;
  batches = std::min(batches, available);
  // The same first `batches` micro-batches at every evaluation, so the curve compares like with like.
  LoaderConfig lc;
  lc.micro_batch_size = args_.micro_batch_size;
  lc.prefetch = false;
  BatchLoader loader(std::shared_ptr<const TokenDataset>(&data, [](const TokenDataset*) {}), lc);
  for (int64_t i = 0; i < batches; ++i) {
    const SampleBatch batch = loader.next();
    eval_objective_->prepare(batch, 1.0f, mb);
    load_images(data, batch, mb);
    keep_context_parallel_rows(mb, parallel_->context().cp.size, parallel_->context().cp.rank);
    r.loss += pipeline_forward_loss(*model_, parallel_->context(), mb);  // forward_loss at pp = 1
  }
  parallel_->sum_over_cp(&r.loss, 1);
  r.batches = batches;
  if (batches > 0) r.loss /= static_cast<double>(batches);
  r.ppl = std::exp(r.loss);
  return r;
}

void Trainer::print_header() const {
  const TransformerConfig& c = args_.model;
  const int64_t params = model_->params().numel();
  const MemoryEstimate& mem = memory_;
  log_info("MegaDLMs C++: ", model_type_name(args_.model_type), " model, ", human_count(static_cast<double>(parameter_count(c))),
           " parameters (", c.num_layers, " layers, hidden ", c.hidden_size, ", ", c.num_attention_heads, " heads / ",
           c.num_query_groups, " kv groups, head dim ", c.kv_channels, ", ffn ", c.ffn_hidden_size, ", vocab ",
           c.vocab_size, " padded from ", tokenizer_->vocab_size(), ")");
  if (LlavaVision* vision = vision_of(*model_)) {
    const LlavaVision& v = *vision;
    const auto count = [&](std::pair<int, int> ids) {
      int64_t n = 0;
      for (int id = ids.first; id < ids.second; ++id) n += model_->params().info(id).shape.numel();
      return static_cast<double>(n);
    };
    const LlavaOptions& o = args_.llava.options;
    log_info("LLaVA: vision tower ", human_count(count(v.tower_params())), " parameters (", o.vision.num_layers,
             " layers, hidden ", o.vision.hidden_size, ", ", o.clip.image_size, " px in patches of ", o.clip.patch_size,
             ": ", v.patches(), " positions an image, feature layer ", o.clip.feature_layer, ")",
             args_.llava.freeze_vision ? " frozen" : "", "; projector ", projector_type_name(o.projector), " ",
             human_count(count(v.projector_params())), "; language model ", model_type_name(args_.model_type),
             args_.llava.freeze_language ? " frozen" : "", "; image token ", o.image_token);
  }
  log_info("memory estimate: ", human_bytes(mem.total()), " (", human_bytes(mem.params_bytes), " weights+grads+AdamW, ",
           human_bytes(mem.activations_bytes), " activations, ", human_bytes(mem.precision_bytes),
           " precision buffers); flat parameter buffer: ", params, " floats");
  log_info("parallel layout: ", describe(args_.parallel.layout, parallel_->context().world_size),
           args_.parallel.use_distributed_optimizer ? ", distributed optimizer" : "",
           args_.parallel.overlap_grad_reduce ? ", overlapped grad reduce" : "", ", ", omp_get_max_threads(),
           " OpenMP threads per rank, ",
           precision_->describe());
  if (const std::string ranks = describe_ranks(); !ranks.empty()) log_info("launch: ", ranks);
  log_info("batch: micro ", args_.micro_batch_size, " x seq ", args_.seq_length, ", global ", args_.global_batch_size,
           " (", args_.global_batch_size / args_.micro_batch_size, " micro-batches per step); data: ", data_.description);
  log_info(objective_->describe());
  char buf[64];
  if (args_.device == Device::CPU) std::snprintf(buf, sizeof buf, "%.1f GFLOP/s", peak_flops_ / 1e9);
  else if (peak_flops_ > 0) std::snprintf(buf, sizeof buf, "%.1f TFLOP/s", peak_flops_ / 1e12);
  else std::snprintf(buf, sizeof buf, "none measured by this backend (MFU 0)");
  if (args_.device == Device::CPU)
    log_info("measured peak for MFU: ", buf, " (", peak_is_bf16_ ? "bf16" : "fp32", " ",
             cpu_backend().peak_gemm_description(), ", ", omp_get_max_threads(), " threads)");
  else
    log_info("device: ", device_name(args_.device), " (kernels/backend.h), GPU ", gpu_index_, " of this rank's node",
             parallel_->dp_size() > 1 ? "; gradients all-reduced over NCCL" : "", "; measured peak for MFU: ", buf,
             " (", peak_is_bf16_ ? "bf16 8192^3" : "fp32 4096^3, no TF32", ", best of 5)");
  if (c.moe.enabled()) log_info(describe_moe(c));
}

int64_t Trainer::run() {
  print_header();
  // Each data-parallel rank runs M of the global batch's micro-batches (Megatron's num_micro_batches).
  const int64_t M = args_.global_batch_size / (args_.micro_batch_size * parallel_->dp_size());
  const double tokens_per_step = static_cast<double>(args_.global_batch_size * args_.seq_length);
  const double flops_per_token = model_flops_per_token(args_.model, args_.seq_length);
  // Micro-batches in Megatron's sampler order from consumed_samples on; the next one is assembled in
  // the background while the current one computes.
  LoaderConfig lc;
  lc.micro_batch_size = args_.micro_batch_size;
  lc.consumed_samples = static_cast<int64_t>(consumed_samples_);
  lc.dp_rank = parallel_->dp_rank();
  lc.dp_size = parallel_->dp_size();
  BatchLoader loader(data_.train, lc);

  Timer run_timer;  // --exit-duration-in-mins
  if (iteration_ == 0 && data_.valid && args_.eval_interval > 0 && args_.eval_iters > 0) evaluate_and_log(0);
  const int64_t first_iteration = iteration_;
  if (iteration_ >= args_.train_iters)
    log_info("iteration ", iteration_, " already reaches --train-iters ", args_.train_iters, ": no step to take");
  Interval interval;
  while (iteration_ < args_.train_iters) {
    const Step step = train_step(loader, M);
    interval += step;
    if (tensorboard_ && tensorboard_->training_due(iteration_)) log_tensorboard(step);
    if (iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters)
      log_interval(step, interval, tokens_per_step, flops_per_token);
    if (data_.valid && args_.eval_interval > 0 && iteration_ % args_.eval_interval == 0) {
      evaluate_and_log(iteration_);
      interval.timer.reset();  // keep evaluation out of the throughput
    }
    if (save_or_exit(run_timer)) break;
  }
  // A resume that takes no step still writes its state into another --save directory, as Megatron's
  // pretrain saves at its end: the checkpoint as this run's layout loaded it (checkpoints hold the
  // full tensors, so the files are the loaded ones when the load and the gather are exact).
  if (iteration_ == first_iteration && !resumed_from_.empty() && !args_.save.empty() &&
      !saves_where_it_resumed(args_.save, resumed_from_))
    save(iteration_);
  return iteration_;
}

Trainer::Step Trainer::train_step(BatchLoader& loader, int64_t M) {
  const float micro_weight = 1.0f / static_cast<float>(M);  // each micro-batch's share of the step
  model_->params().zero_grads();
  Step step;
  // The next micro-batch from the loader, its objective statistics counted, with its images
  // (--model-type llava, on the stage with the tower). Under context parallelism the whole micro-batch is prepared, then this rank keeps its chunks
  // (models/context_parallel.h); the statistics are the whole micro-batch's on every cp rank.
  const ParallelContext& ctx = parallel_->context();
  auto next_micro_batch = [&](MicroBatch& mb) {
    const SampleBatch batch = loader.next();
    step.stats += objective_->prepare(batch, micro_weight, mb);
    load_images(*data_.train, batch, mb);
    keep_context_parallel_rows(mb, ctx.cp.size, ctx.cp.rank);
  };
  if (parallel_->context().pp.size > 1) {
    // 1F1B over the pipeline stages, each preparing every micro-batch itself; the loss comes from
    // the last stage (train/pipeline_schedule.h). The dp reduction is not overlapped here: the
    // tied embedding's gradient is summed over the stages first. LLaVA's micro-batches carry their
    // images to each of their forwards.
    step.loss = pipeline_1f1b_step(
        *model_, parallel_->context(), M, [&](int64_t, MicroBatch& mb) { next_micro_batch(mb); },
        precision_->grad_scale());
    parallel_->before_micro_batch(M - 1, M);  // arms the buckets after every backward: no overlap
  } else {
    for (int64_t m = 0; m < M; ++m) {
      next_micro_batch(micro_batch_);
      parallel_->before_micro_batch(m, M);
      step.loss += model_->forward_backward(micro_batch_, precision_->grad_scale());
    }
  }
  // Gradients become the data-parallel mean; the loss and statistics the global batch's (the cp ranks'
  // losses are parts of one sum).
  parallel_->reduce_gradients();
  parallel_->sum_over_cp(&step.loss, 1);
  {
    double v[5] = {step.loss, step.stats.sum_t, step.stats.loss_tokens, step.stats.real_tokens, step.stats.sequences};
    parallel_->sum_over_dp(v, 5);
    step.loss = v[0] / parallel_->dp_size();
    step.stats.sum_t = v[1];
    step.stats.loss_tokens = v[2];
    step.stats.real_tokens = v[3];
    step.stats.sequences = v[4];
  }
  if (after_backward_hook_) after_backward_hook_(iteration_ + 1, *this);
  step.lr = args_.lr.at(iteration_ + 1);
  // A non-finite loss or gradient norm skips the update rather than poison the weights (step_guard.h);
  // too many in a row throw from record(), before this iteration can save anything.
  // An fp16 overflow is the loss scaler's business (precision_runtime.h): skipped and counted there.
  const bool overflow = precision_->overflowed();
  step.grad_norm = std::isfinite(step.loss) && !overflow ? parallel_->grad_norm() : NAN;
  const StepSkip skip = classify_step(step.loss, overflow ? 0.0 : step.grad_norm);
  bool copies_written = false;  // the bf16 weight copies, by AdamW on its pass (precision_runtime.h)
  if (skip == StepSkip::None && !overflow)
    copies_written = parallel_->apply(*optimizer_, step.lr, step.grad_norm, precision_->bf16_copy_targets());
  step_guard_.record(skip, iteration_ + 1, step.loss, step.grad_norm);
  precision_->after_step(copies_written);
  precision_->report_memory_once(memory_);
  step.moe = take_moe_layers(*model_);
  sum_moe_layers_over_dp(parallel_->context().dp, step.moe);
  consumed_samples_ += static_cast<uint64_t>(args_.global_batch_size);
  ++iteration_;
  return step;
}

void Trainer::log_interval(const Step& last, Interval& interval, double tokens_per_step, double flops_per_token) {
  const double secs = interval.timer.seconds();
  const double steps = static_cast<double>(interval.steps);
  const double tps = tokens_per_step * steps / secs;
  // tps counts every rank's tokens; the peak is one rank's.
  const double mfu = peak_flops_ > 0 ? tps * flops_per_token / (peak_flops_ * parallel_->context().world_size) : 0;
  const double loss = interval.loss / steps;
  const double consumed_tokens = static_cast<double>(consumed_samples_) * static_cast<double>(args_.seq_length);
  char line[512];
  int n = std::snprintf(line, sizeof line, " iteration %8lld/%8lld | consumed tokens %12.0f | lr %.3E | loss %.4E",
                        static_cast<long long>(iteration_), static_cast<long long>(args_.train_iters), consumed_tokens,
                        last.lr, loss);
  n += std::snprintf(line + n, sizeof line - n, "%s", objective_->log_fields(interval.stats).c_str());
  std::snprintf(line + n, sizeof line - n,
                " | grad norm %.3f | tokens/s %.0f | MFU %.1f%% | step time %.1f ms | skipped %lld", last.grad_norm,
                tps, 100.0 * mfu, 1000.0 * secs / steps,
                static_cast<long long>(step_guard_.total() + precision_->overflow_skips()));
  const MoEReport moe = summarize_moe(std::move(interval.moe));
  std::string comm_text;
  nlohmann::json comm_json = nlohmann::json::object();
  parallel_->take_comm_report(interval.steps, comm_text, comm_json);
  log_line(std::string(line) + precision_->log_suffix() + moe_line_suffix(moe) + comm_text);
  for (const std::string& l : moe_layer_lines(moe)) log_line(l);
  if (metrics_) {
    nlohmann::json j = {{"iteration", iteration_},
                        {"consumed_tokens", consumed_tokens},
                        {"lr", last.lr},
                        {"loss", loss},
                        {"grad_norm", std::isfinite(last.grad_norm) ? last.grad_norm : -1.0},
                        {"tokens_per_s", tps},
                        {"mfu", mfu},
                        {"step_time_s", secs / steps},
                        {"skipped_steps", step_guard_.total() + precision_->overflow_skips()}};
    precision_->add_metrics(j);
    objective_->add_metrics(interval.stats, j);
    add_moe_metrics(moe, j);
    if (comm_json.contains("comm")) j["comm"] = comm_json["comm"];
    metrics_->write(j);
  }
  if (tensorboard_)
    tensorboard_->timers(iteration_, secs / steps, tps * flops_per_token / (1e12 * parallel_->context().world_size));
  interval = Interval();
}

void Trainer::log_tensorboard(const Step& step) {
  TrainingScalars s;
  s.iteration = iteration_;
  s.consumed_samples = static_cast<int64_t>(consumed_samples_);
  s.loss = step.loss;
  s.lr = step.lr;
  s.grad_norm = step.grad_norm;
  s.loss_scale = precision_->grad_scale();
  s.batch_size = args_.global_batch_size;
  s.world_size = parallel_->context().world_size;
  tensorboard_->training(s, step.moe);
}

void Trainer::evaluate_and_log(int64_t iteration) {
  const EvalResult e = evaluate(*data_.valid, args_.eval_iters);
  log_info("validation at iteration ", iteration, ": loss ", e.loss, " | ", objective_->perplexity_name(), " ", e.ppl);
  if (metrics_) metrics_->write({{"iteration", iteration}, {"val_loss", e.loss}, {"val_ppl", e.ppl}});
  if (tensorboard_) tensorboard_->validation(iteration, static_cast<int64_t>(consumed_samples_), e.loss);
}

bool Trainer::save_or_exit(const Timer& run_timer) {
  // Polled once per iteration: the step just taken is complete, so the checkpoint is consistent.
  // Under MPI every rank must take the same decision (a rank alone in a save or an exit would leave
  // the others waiting in a collective): the signal and the clock are taken as the max over ranks.
  float local_exit[2] = {static_cast<float>(args_.exit_signal_handler ? exit_signal_received() : 0),
                         args_.exit_duration_in_mins > 0 && run_timer.seconds() > 60.0 * args_.exit_duration_in_mins
                             ? 1.0f : 0.0f};
  parallel_->max_over_world(local_exit, 2);
  const int signum = static_cast<int>(local_exit[0]);
  const bool exit_now = (args_.exit_interval > 0 && iteration_ % args_.exit_interval == 0) || local_exit[1] != 0 ||
                        signum != 0;
  if (!args_.save.empty() && ((args_.save_interval > 0 && iteration_ % args_.save_interval == 0) ||
                              iteration_ == args_.train_iters || exit_now))
    save(iteration_);
  if (!exit_now) return false;
  if (signum != 0)
    log_info("exiting at iteration ", iteration_, " on ", signal_name(signum), " (--exit-signal-handler)",
             args_.save.empty() ? "; no --save, nothing saved" : "");
  else
    log_info("exiting at iteration ", iteration_, " (--exit-interval / --exit-duration-in-mins)");
  return true;
}

}  // namespace megadlm
