#include "train/tensorboard_arguments.h"


namespace megadlm {

void declare_tensorboard_flags(CliFlags& f) {
  f.add_string("tensorboard-dir", "", "write TensorBoard event files here (rank 0; the tags: docs/training_brown.md)");
  f.add_int("tensorboard-log-interval", 1, "iterations between TensorBoard training scalars", at_least(1));
  f.add_int("tensorboard-queue-size", 1000,
            "accepted for Megatron's scripts and ignored: events are written and flushed at each log batch", at_least(1));
  f.add_bool("log-validation-ppl-to-tensorboard", "also write the validation perplexity to TensorBoard");
  f.add_bool("log-timers-to-tensorboard", "write iteration-time (and throughput with --log-throughput) to TensorBoard");
  f.add_bool("log-throughput",
             "with --log-timers-to-tensorboard, write throughput (TFLOP/s per rank) to TensorBoard; the log line "
             "always shows tokens/s and MFU");
  f.add_bool("log-batch-size-to-tensorboard", "accepted for Megatron's scripts: batch-size is always written");
  f.add_bool("no-log-loss-scale-to-tensorboard", "do not write loss-scale to TensorBoard");
  f.add_bool("log-world-size-to-tensorboard", "also write world-size to TensorBoard");
}

TensorBoardArgs read_tensorboard_flags(const CliFlags& f) {
  TensorBoardArgs a;
  a.dir = f.get_string("tensorboard-dir");
  a.log_interval = f.get_int("tensorboard-log-interval");
  a.validation_ppl = f.get_bool("log-validation-ppl-to-tensorboard");
  a.timers = f.get_bool("log-timers-to-tensorboard");
  a.throughput = f.get_bool("log-throughput");
  a.loss_scale = !f.get_bool("no-log-loss-scale-to-tensorboard");
  a.world_size = f.get_bool("log-world-size-to-tensorboard");
  return a;
}

}  // namespace megadlm
