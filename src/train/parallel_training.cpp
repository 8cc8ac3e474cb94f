#include "train/parallel_training.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "checkpoint/reshard.h"
#include "core/device_memory.h"
#include "kernels/backend.h"
#include "parallel/device_communicator.h"
#include "parallel/grad_norm.h"
#include "parallel/layout.h"
#include "parallel/mpi_communicator.h"
#include "core/log.h"
#include "train/run_directories.h"

namespace megadlm {

namespace {

// The groups in the order of the report.
const ParallelGroup* group_at(const ParallelContext& c, int i, const char** name) {
  static const char* names[] = {"tp", "pp", "dp", "ep", "edp", "cp", "world"};
  const ParallelGroup* g[] = {&c.tp, &c.pp, &c.dp, &c.ep, &c.edp, &c.cp, &c.world};
  *name = names[i];
  return g[i];
}
constexpr int kGroups = 7;

}  // namespace

ParallelTraining::ParallelTraining(const ParallelArgs& args, const TransformerConfig& model, int64_t micro,
                                   int64_t global, Device device)
    : args_(args) {
  validate_parallel_layout(args, world_size(), model, micro, global);
  ctx_ = make_parallel_context(args.layout);
  ctx_.sequence_parallel = args.sequence_parallel;
  if (device != Device::CPU) {
    backend_for(device);  // started first: it registers the device communicator factory
    // The groups that move device buffers (gradients, stage activations, the tied embedding's
    // gradient, the tensor-parallel activations and their gradients, the vocab-parallel loss's row
    // statistics, the rows sent to and back from the experts, the ring attention's keys and values and
    // their gradients) get NCCL beside their MPI communicator, which keeps the host's scalars (losses,
    // counts, norms' partial sums, exit decisions). Collective over each group, in this order on every
    // rank.
    for (auto [g, name] : {std::pair<ParallelGroup*, const char*>{&ctx_.dp, "dp"}, {&ctx_.edp, "edp"},
                           {&ctx_.pp, "pp"}, {&ctx_.embd, "embd"}, {&ctx_.tp, "tp"}, {&ctx_.ep, "ep"},
                           {&ctx_.cp, "cp"}})
      if (g->size > 1) g->device_comm = make_device_communicator(device, g->communicator(), name);
  }
}

ParallelTraining::~ParallelTraining() = default;

void ParallelTraining::attach(LanguageModel& model, const AdamWConfig& adam, ModelFactory make_model) {
  if (!model.is_first_stage()) tied_copy_ = model.shared_embedding_id();
  auto make_params = [make_model = std::move(make_model)](const ParallelContext& ctx) {
    std::shared_ptr<LanguageModel> m = make_model(ctx);
    return std::shared_ptr<ParamStore>(m, &m->params());
  };
  attach_params(model.params(), adam, std::move(make_params), model.device(), args_.overlap_grad_reduce);
  if (buckets_ && ctx_.dp.size > 1 && args_.overlap_grad_reduce)
    model.set_grads_ready_hook([this](int first) { buckets_->grads_ready(first); });
}

void ParallelTraining::attach(ParamStore& params, const AdamWConfig& adam, ParamsFactory make_params,
                              int tied_copy) {
  tied_copy_ = tied_copy;
  attach_params(params, adam, std::move(make_params), params.device(), false);
}

void ParallelTraining::attach_params(ParamStore& params, const AdamWConfig& adam, ParamsFactory make_params,
                                     Device device, bool overlap) {
  params_ = &params;
  device_ = device;
  make_params_ = std::move(make_params);
  if (args_.use_distributed_optimizer)
    dist_ = std::make_unique<DistributedOptimizer>(params, adam, ctx_);
  else
    buckets_ = std::make_unique<GradBuckets>(params, ctx_, args_.ddp_bucket_size, overlap);
}

void ParallelTraining::before_micro_batch(int64_t m, int64_t M) {
  if (buckets_ && m == M - 1) buckets_->arm();
}

void ParallelTraining::reduce_gradients() {
  // The cp sum goes over the whole buffer: before the distributed optimizer's reduce-scatter, after
  // the buckets' dp reductions (which may be in flight on the buffer until finish()).
  auto sum_over_cp = [this] {
    if (ctx_.cp.size > 1) ctx_.cp.communicator(device_).all_reduce_sum(params_->grads(), params_->numel());
  };
  if (dist_) {
    sum_over_cp();
    dist_->reduce_scatter_grads();
    // Expert gradients would need edp; the constructor refuses ep > 1.
  } else if (buckets_) {
    buckets_->finish();
    sum_over_cp();
  }
}

void ParallelTraining::sum_over_dp(double* v, int n) {
  if (ctx_.dp.size > 1) ctx_.dp.communicator().all_reduce_sum(v, n);
}

void ParallelTraining::sum_over_cp(double* v, int n) {
  if (ctx_.cp.size > 1) ctx_.cp.communicator().all_reduce_sum(v, n);
}

std::function<bool(const ParamInfo&)> ParallelTraining::duplicate_filter() const {
  // Tied embeddings with pp > 1: the last stage's copy of embed_tokens.weight equals the first
  // stage's after the embedding-group sum; count it once, on the first stage.
  if (ctx_.pp.size <= 1 || tied_copy_ < 0) return nullptr;
  const int64_t offset = params_->info(tied_copy_).offset;
  return [offset](const ParamInfo& p) { return p.offset == offset; };
}

void ParallelTraining::max_over_world(float* v, int n) {
  if (ctx_.world_size > 1) ctx_.world.communicator().all_reduce_max(v, n);
}

std::function<bool(const ParamInfo&)> ParallelTraining::norm_filter() const {
  auto duplicate = duplicate_filter();
  if (frozen_offsets_.empty()) return duplicate;
  return [duplicate, frozen = frozen_offsets_](const ParamInfo& p) {
    return (duplicate && duplicate(p)) || std::binary_search(frozen.begin(), frozen.end(), p.offset);
  };
}

void ParallelTraining::freeze(AdamW& opt, int first_id, int end_id) {
  MEGADLM_CHECK(params_ != nullptr, "ParallelTraining::freeze before attach");
  opt.freeze(first_id, end_id);
  for (int id = first_id; id < end_id; ++id) frozen_offsets_.push_back(params_->info(id).offset);
  std::sort(frozen_offsets_.begin(), frozen_offsets_.end());
}

double ParallelTraining::grad_norm() {
  if (dist_) return dist_->grad_norm(norm_filter());
  GradNormOptions o;
  o.skip_param = norm_filter();
  return std::sqrt(global_grad_norm_sq(*params_, ctx_, o));
}

bool ParallelTraining::apply(AdamW& opt, double lr, double norm, const std::vector<uint16_t*>& bf16_copies) {
  if (dist_) {
    dist_->apply(lr, norm, opt.frozen_ids());
    opt.set_steps_taken(dist_->steps_taken());
    return false;
  }
  // Nothing reads this step's gradients after the update: it clears them on its pass.
  opt.apply_and_zero_grads(lr, norm, bf16_copies);
  return !bf16_copies.empty();
}

// With the distributed optimizer the full-size moments exist only around a checkpoint: gathered into
// for a save, read into by a load, freed again after (the shards live in dist_), so that AdamW's state
// costs 8 bytes per parameter / dp on each rank, not 8 bytes per parameter.
void ParallelTraining::adopt(AdamW& opt) {
  if (dist_) opt.release_state();
}

void ParallelTraining::before_save(AdamW& opt) {
  if (!dist_) return;
  opt.ensure_state();
  dist_->gather_state(opt);
}

void ParallelTraining::after_load(AdamW& opt) {
  if (!dist_) return;
  dist_->scatter_state(opt);
  opt.release_state();
}

void ParallelTraining::save_run_checkpoint(const std::string& save_dir, const ParamStore& params, AdamW& opt,
                                           const CheckpointState& st) {
  check_finite_before_save(params, &opt, st.iteration, save_dir);
  Timer t;
  // Collective: every rank takes part, rank 0 writes the full tensors whatever the layout.
  const std::string dir = save_checkpoint(save_dir, opt, st);
  if (dir.empty()) return;
  log_info("saved checkpoint ", dir, " in ", t.seconds(), " s");
}

bool ParallelTraining::load_run_checkpoint(const std::string& dir, const CheckpointState& st, AdamW& opt, bool finetune,
                                           bool no_load_optim) {
  // Any layout: each rank takes its piece of the full tensors.
  load_checkpoint(dir, finetune || no_load_optim ? nullptr : &opt);
  log_loaded(dir, st, finetune);
  return !finetune;
}

std::string ParallelTraining::save_checkpoint(const std::string& save_dir, AdamW& opt, const CheckpointState& st) {
  before_save(opt);
  struct Release {
    ParallelTraining* self;
    AdamW& opt;
    ~Release() {
      if (self->dist_) opt.release_state();
    }
  } release{this, opt};
  if (device_ != Device::CPU) return save_from_device(save_dir, opt, st);
  return save_from_host(save_dir, *params_, opt, st);
}

// Whether ranks hold different parts of the model: tensor shards, pipeline stages, or (expert
// parallelism) different experts.
bool ParallelTraining::split() const { return ctx_.tp.size > 1 || ctx_.pp.size > 1 || ctx_.ep.size > 1; }

// `local`: this rank's part of the model on the host, its moments in `opt`.
std::string ParallelTraining::save_from_host(const std::string& save_dir, ParamStore& local, AdamW& opt,
                                             const CheckpointState& st) {
  if (!split()) {
    // Every rank holds the whole model: rank 0 writes it as is.
    return writes_files() ? megadlm::save_checkpoint(save_dir, local, &opt, st) : std::string();
  }
  std::shared_ptr<ParamStore> full;
  std::unique_ptr<AdamW> full_opt;
  MomentBuffers fm;
  if (writes_files()) {
    full = make_params_(ParallelContext::single());
    full_opt = std::make_unique<AdamW>(*full, AdamWConfig{});
    full_opt->set_steps_taken(opt.steps_taken());
    fm = {full_opt->exp_avg().data<float>(), full_opt->exp_avg_sq().data<float>()};
  }
  gather_full_state(local, {opt.exp_avg().data<float>(), opt.exp_avg_sq().data<float>()}, ctx_, full.get(), fm);
  return full ? megadlm::save_checkpoint(save_dir, *full, full_opt.get(), st) : std::string();
}

void ParallelTraining::load_checkpoint(const std::string& dir, AdamW* opt) {
  if (opt) opt->ensure_state();  // released under the distributed optimizer; after_load frees it again
  if (device_ != Device::CPU) load_to_device(dir, opt);
  else load_into_host(dir, *params_, opt);
  if (opt) after_load(*opt);
}

void ParallelTraining::load_into_host(const std::string& dir, ParamStore& local, AdamW* opt) {
  if (!split()) {
    load_checkpoint_tensors(dir, local, opt);
    return;
  }
  // Every rank reads the full tensors into a single-process model and keeps its piece.
  std::shared_ptr<ParamStore> full = make_params_(ParallelContext::single());
  std::unique_ptr<AdamW> full_opt = opt ? std::make_unique<AdamW>(*full, AdamWConfig{}) : nullptr;
  load_checkpoint_tensors(dir, *full, full_opt.get());
  MomentBuffers fm, lm;
  if (opt) {
    fm = {full_opt->exp_avg().data<float>(), full_opt->exp_avg_sq().data<float>()};
    lm = {opt->exp_avg().data<float>(), opt->exp_avg_sq().data<float>()};
    opt->set_steps_taken(full_opt->steps_taken());
  }
  take_local_state(*full, fm, local, lm);
}

// A model on a device is written through a host twin of the same layout (a CPU model of this rank's
// part: the whole model under dp alone, else its tp shard of its pp stage): the flat buffers are
// downloaded into it and it is saved as a CPU run's would be.
std::string ParallelTraining::save_from_device(const std::string& save_dir, AdamW& opt, const CheckpointState& st) {
  // Without a split every rank holds the same model: rank 0's copy is written, by rank 0 alone.
  if (!split() && !writes_files()) return {};
  std::shared_ptr<ParamStore> host = host_twin();
  params_->copy_values_to_host(host->values());
  AdamW host_opt(*host, AdamWConfig{});
  copy_moments(host_opt, opt);
  return save_from_host(save_dir, *host, host_opt, st);
}

// The reverse: read into a host twin, then upload the flat buffers.
void ParallelTraining::load_to_device(const std::string& dir, AdamW* opt) {
  std::shared_ptr<ParamStore> host = host_twin();
  std::unique_ptr<AdamW> host_opt = opt ? std::make_unique<AdamW>(*host, AdamWConfig{}) : nullptr;
  load_into_host(dir, *host, host_opt.get());
  params_->copy_values_from_host(host->values());
  if (opt) copy_moments(*opt, *host_opt);
}

// A CPU model of this rank's part: the whole model without a split, else its tp shard of its pp stage.
std::shared_ptr<ParamStore> ParallelTraining::host_twin() const {
  std::shared_ptr<ParamStore> host = make_params_(split() ? ctx_ : ParallelContext::single());
  MEGADLM_CHECK(host->numel() == params_->numel(), "the host copy's layout differs from the model's");
  return host;
}

// Both moments and the step count of src into dst, optimizers of one layout on any two devices.
void ParallelTraining::copy_moments(AdamW& dst, AdamW& src) {
  const size_t bytes = sizeof(float) * static_cast<size_t>(src.exp_avg().numel());
  copy_bytes(dst.exp_avg().raw(), dst.exp_avg().device(), src.exp_avg().raw(), src.exp_avg().device(), bytes);
  copy_bytes(dst.exp_avg_sq().raw(), dst.exp_avg_sq().device(), src.exp_avg_sq().raw(), src.exp_avg_sq().device(),
             bytes);
  dst.set_steps_taken(src.steps_taken());
}

void ParallelTraining::take_comm_report(int64_t steps, std::string& line, nlohmann::json& metrics) {
  const double per = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  nlohmann::json comm = nlohmann::json::object();
  for (int i = 0; i < kGroups; ++i) {
    const char* name = nullptr;
    const ParallelGroup* g = group_at(ctx_, i, &name);
    if (g->size <= 1 || !g->comm) continue;
    // Host and device traffic of the group together (a GPU run's gradients go through device_comm).
    CommStats s = g->comm->stats();
    if (g->device_comm) {
      s.bytes_sent += g->device_comm->stats().bytes_sent;
      s.seconds += g->device_comm->stats().seconds;
    }
    const double bytes = (s.bytes_sent - last_bytes_[i]) * per, secs = (s.seconds - last_seconds_[i]) * per;
    last_bytes_[i] = s.bytes_sent;
    last_seconds_[i] = s.seconds;
    if (bytes == 0 && secs == 0) continue;  // a group without traffic (edp of a dense model)
    comm[name] = {{"bytes_per_step", bytes}, {"seconds_per_step", secs}};
    char buf[96];
    std::snprintf(buf, sizeof buf, " | comm %s %.2f MB %.1f ms", name, bytes / 1e6, 1000.0 * secs);
    line += buf;
  }
  if (!comm.empty()) metrics["comm"] = comm;
}

}  // namespace megadlm
