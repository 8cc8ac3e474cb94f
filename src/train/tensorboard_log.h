#pragma once
// What the trainer writes to TensorBoard, under Megatron's tags and at Megatron's cadence
// (megatron/training/training.py training_log and evaluate_and_print_results,
// megatron/core/transformer/moe/moe_utils.py track_moe_metrics). Every training scalar but the MoE
// losses is written twice, against the iteration and as "<tag> vs samples" against the consumed
// samples, as Megatron does:
//   every --tensorboard-log-interval iterations: learning-rate, batch-size, lm loss, loss-scale
//     (unless --no-log-loss-scale-to-tensorboard), world-size (--log-world-size-to-tensorboard),
//     grad-norm (not for a skipped step), and for MoE models load_balancing_loss (aux_loss) or
//     seq_load_balancing_loss (seq_aux_loss), z_loss (with --moe-z-loss-coeff): the mean over the
//     MoE layers of the loss without its coefficient, per micro-batch of the step;
//   at each log line, with --log-timers-to-tensorboard: iteration-time (seconds), and throughput
//     (model TFLOP/s per rank) with --log-throughput as well;
//   at each evaluation: lm loss validation, and with --log-validation-ppl-to-tensorboard
//     lm loss validation ppl (exp(min(20, loss)), as Megatron).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/moe/moe_config.h"
#include "train/moe_metrics.h"
#include "train/tensorboard_arguments.h"
#include "train/tensorboard_writer.h"

namespace megadlm {

// One training step's scalars, after the step (consumed_samples counts it).
struct TrainingScalars {
  int64_t iteration = 0, consumed_samples = 0;
  double loss = 0, lr = 0, grad_norm = 0;  // grad_norm NaN for a skipped step
  double loss_scale = 1;
  int64_t batch_size = 0, world_size = 1;
};

class TensorBoardLog {
 public:
  // Opens a new event file in args.dir (created when missing). Error naming --tensorboard-dir.
  TensorBoardLog(const TensorBoardArgs& args, const MoEConfig& moe);

  bool training_due(int64_t iteration) const { return iteration % args_.log_interval == 0; }
  // The step's scalars and its MoE layers' losses (take_moe_layers of the step); flushed.
  void training(const TrainingScalars& s, const std::vector<MoELayerReport>& moe_layers);
  // At a log line: the interval's mean time per iteration and model TFLOP/s per rank; flushed.
  void timers(int64_t iteration, double seconds_per_iteration, double tflops_per_rank);
  // At an evaluation; flushed.
  void validation(int64_t iteration, int64_t consumed_samples, double loss);

  const std::string& path() const { return writer_->path(); }

 private:
  void both(const std::string& tag, double value, const TrainingScalars& s);
  void moe_losses(int64_t iteration, const std::vector<MoELayerReport>& layers);

  TensorBoardArgs args_;
  MoEConfig moe_;
  std::unique_ptr<TensorBoardWriter> writer_;
};

}  // namespace megadlm
