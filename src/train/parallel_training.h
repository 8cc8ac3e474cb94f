#pragma once
// What the Trainer needs from the parallel layout, in one place: the groups (make_parallel_context),
// this rank's share of the data (Megatron's sampler: dp rank r takes rows [r B, (r+1) B) of each
// consecutive B x dp block), the gradient reduction (bucketed all-reduce over dp / edp, overlapped
// with the last micro-batch's backward when --overlap-grad-reduce, or the distributed optimizer's
// reduce-scatter), the global gradient norm, the update, the log's reductions, and the checkpoint
// hooks. With one rank every call is a no-op or a plain AdamW call.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/native_checkpoint.h"
#include "models/language_model.h"
#include "optim/adamw.h"
#include "optim/distributed_optimizer.h"
#include "parallel/grad_buckets.h"
#include "parallel/parallel_context.h"
#include "train/parallel_arguments.h"

namespace megadlm {

class ParallelTraining {
 public:
  // Builds the groups (collective over the world) after checking the layout against the world and
  // the model (validate_parallel_layout). On a GPU (`device` CUDA) the data-parallel groups also get a
  // device communicator (NCCL) for the gradients; the other kinds of parallelism are refused there.
  ParallelTraining(const ParallelArgs& args, const TransformerConfig& model, int64_t micro_batch_size,
                   int64_t global_batch_size, Device device = Device::CPU);
  ~ParallelTraining();

  const ParallelContext& context() const { return ctx_; }
  int dp_rank() const { return ctx_.dp.rank; }
  int dp_size() const { return ctx_.dp.size; }
  // Rank 0 alone writes the log, metrics.jsonl and checkpoints (full tensors, gathered).
  bool writes_files() const { return ctx_.world_rank == 0; }
  bool distributed_optimizer() const { return dist_ != nullptr; }

  // After the model and its AdamW exist: installs the grads-ready hook, builds buckets or the
  // distributed optimizer. make_model builds a CPU model of the run's configuration for a layout:
  // ParallelContext::single() for the whole model (checkpoints of split models), the run's context for
  // a host twin of this rank's part (checkpoints of a model on a device).
  using ModelFactory = std::function<std::unique_ptr<LanguageModel>(const ParallelContext&)>;
  void attach(LanguageModel& model, const AdamWConfig& adam, ModelFactory make_model);
  // The same for another model's parameters (BertModel's, T5Model's): on the CPU, the gradients
  // reduced after the last backward (no overlap). make_params builds that model for a layout and gives
  // its parameters (an aliasing shared_ptr keeps the model alive). tied_copy: under pp > 1, the id of
  // the last stage's copy of the tied word embeddings, which the gradient norm counts once (on the
  // first stage), or -1.
  using ParamsFactory = std::function<std::shared_ptr<ParamStore>(const ParallelContext&)>;
  void attach(ParamStore& params, const AdamWConfig& adam, ParamsFactory make_params, int tied_copy = -1);
  // Before the forward/backward of local micro-batch m of M: the last one arms the bucket launches.
  void before_micro_batch(int64_t m, int64_t M);
  // After the last backward: gradients become the data-parallel mean (or the optimizer's shards),
  // summed over the context-parallel ranks first (each saw its chunks of the same sequences).
  void reduce_gradients();
  // Sums v[n] over the data-parallel group (the step's loss and objective statistics for the log).
  void sum_over_dp(double* v, int n);
  // Sums v[n] over the context-parallel group (its ranks' parts of a micro-batch's loss).
  void sum_over_cp(double* v, int n);
  // v[n] <- max over every rank (exit decisions); nothing with one rank.
  void max_over_world(float* v, int n);
  // Parameters [first_id, end_id) of the attached store are frozen (Megatron's requires_grad=False):
  // `opt` leaves them as they are (AdamW::freeze) and the gradient norm leaves them out, so that the
  // gradients their module still computes on the way to earlier parameters do not scale the others' clip.
  void freeze(AdamW& opt, int first_id, int end_id);
  // The global gradient norm (parallel/grad_norm.h), identical on every rank; frozen parameters are not in it.
  double grad_norm();
  // Clips by norm and updates (AdamW, or the sharded update then the all-gather). bf16_copies: per
  // parameter id, a bf16 copy AdamW writes on its pass (MixedPrecision::bf16_copy_targets); returns
  // whether it did (not under the distributed optimizer, whose shards end mid-parameter). AdamW leaves
  // the gradients zero on its pass (the next step's zero_grads then costs nothing).
  bool apply(AdamW& opt, double lr, double norm, const std::vector<uint16_t*>& bf16_copies = {});
  // Checkpoints: the distributed optimizer's moment shards gathered into / taken from `opt`'s
  // full-size buffers, so the files keep the single-process format. Collective.
  // Called once on the trainer's AdamW: under the distributed optimizer its full-size moments are
  // freed (they exist only around checkpoints).
  void adopt(AdamW& opt);
  void before_save(AdamW& opt);
  void after_load(AdamW& opt);
  // The checkpoint in the single-process format whatever the layout (checkpoint/reshard.h):
  // collective; returns the directory written on the writing rank, "" on the others.
  std::string save_checkpoint(const std::string& save_dir, AdamW& opt, const CheckpointState& st);
  // Loads this rank's piece of every parameter (and the optimizer state when opt is not null).
  void load_checkpoint(const std::string& dir, AdamW* opt);
  // A trainer's checkpoint of iteration st.iteration: `params` and the moments checked finite first (the
  // last good checkpoint is never replaced by a poisoned state), then save_checkpoint, logged with its
  // time. Collective.
  void save_run_checkpoint(const std::string& save_dir, const ParamStore& params, AdamW& opt,
                           const CheckpointState& st);
  // A trainer's --load of `dir` (its state `st`): the weights, and the moments unless finetune or
  // no_load_optim; logged. Returns whether the run continues from the checkpoint's iteration and
  // samples (not under finetune, which starts at 0 from the weights).
  bool load_run_checkpoint(const std::string& dir, const CheckpointState& st, AdamW& opt, bool finetune,
                           bool no_load_optim);

  // Communication since the last call, per group with traffic: " | comm dp 1.2 MB 3.4 ms" for the log
  // line (per step: divided by steps) and {"comm": {"dp": {"bytes": .., "seconds": ..}}} in metrics.
  void take_comm_report(int64_t steps, std::string& line, nlohmann::json& metrics);

 private:
  ParallelArgs args_;
  ParallelContext ctx_;
  ParamStore* params_ = nullptr;
  Device device_ = Device::CPU;
  int tied_copy_ = -1;  // this rank's duplicate of another stage's parameter (duplicate_filter), or -1
  std::vector<int64_t> frozen_offsets_;  // sorted: the flat offsets of frozen parameters (freeze)
  ParamsFactory make_params_;
  void attach_params(ParamStore& params, const AdamWConfig& adam, ParamsFactory make_params, Device device,
                     bool overlap);
  std::function<bool(const ParamInfo&)> duplicate_filter() const;
  // Parameters the gradient norm leaves out on this rank: the duplicate and the frozen ones (null: none).
  std::function<bool(const ParamInfo&)> norm_filter() const;
  bool split() const;  // tp, pp or ep: each rank holds a part of the model
  // Checkpoints of `local`, this rank's part on the host (the model itself on the CPU).
  std::string save_from_host(const std::string& save_dir, ParamStore& local, AdamW& opt, const CheckpointState& st);
  void load_into_host(const std::string& dir, ParamStore& local, AdamW* opt);
  // Checkpoints of a model on a device, through a host twin (make_params_).
  std::string save_from_device(const std::string& save_dir, AdamW& opt, const CheckpointState& st);
  void load_to_device(const std::string& dir, AdamW* opt);
  std::shared_ptr<ParamStore> host_twin() const;
  static void copy_moments(AdamW& dst, AdamW& src);
  std::unique_ptr<GradBuckets> buckets_;
  std::unique_ptr<DistributedOptimizer> dist_;
  double last_bytes_[8] = {}, last_seconds_[8] = {};
};

}  // namespace megadlm
