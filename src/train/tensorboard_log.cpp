#include "train/tensorboard_log.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace megadlm {

namespace {

// Megatron's name for the load-balancing loss it tracks ("" when none is).
const char* load_balancing_tag(MoELoadBalancing l) {
  switch (l) {
    case MoELoadBalancing::AuxLoss: return "load_balancing_loss";
    case MoELoadBalancing::SeqAuxLoss: return "seq_load_balancing_loss";
    case MoELoadBalancing::None: return "";
  }
  return "";
}

// Megatron tracks each router loss divided by its coefficient, per micro-batch, and writes the mean
// over the MoE layers. The layers' statistics hold the loss with its coefficient, summed over the
// step's micro-batches.
double mean_over_layers(const std::vector<MoELayerReport>& layers, double MoEStats::*loss, double coeff) {
  if (layers.empty() || coeff <= 0) return 0.0;
  double sum = 0;
  for (const MoELayerReport& l : layers)
    sum += l.stats.*loss / static_cast<double>(std::max<int64_t>(1, l.stats.micro_batches)) / coeff;
  return sum / static_cast<double>(layers.size());
}

std::unique_ptr<TensorBoardWriter> open_writer(const std::string& dir) {
  try {
    const double now = wall_time_now();
    TensorBoardWriterOptions options;
    options.start_time = now;
    return std::make_unique<TensorBoardWriter>(new_event_file_path(dir, now), options);
  } catch (const Error& e) {
    fail("--tensorboard-dir: ", e.what());
  }
}

}  // namespace

TensorBoardLog::TensorBoardLog(const TensorBoardArgs& args, const MoEConfig& moe)
    : args_(args), moe_(moe), writer_(open_writer(args.dir)) {}

void TensorBoardLog::both(const std::string& tag, double value, const TrainingScalars& s) {
  writer_->add_scalar(tag, value, s.iteration);
  writer_->add_scalar(tag + " vs samples", value, s.consumed_samples);
}

void TensorBoardLog::training(const TrainingScalars& s, const std::vector<MoELayerReport>& moe_layers) {
  both("learning-rate", s.lr, s);
  both("batch-size", static_cast<double>(s.batch_size), s);
  both("lm loss", s.loss, s);
  if (args_.loss_scale) both("loss-scale", s.loss_scale, s);
  if (args_.world_size) both("world-size", static_cast<double>(s.world_size), s);
  // Megatron has no gradient norm for a skipped step and writes none.
  if (std::isfinite(s.grad_norm)) both("grad-norm", s.grad_norm, s);
  if (moe_.enabled()) moe_losses(s.iteration, moe_layers);
  writer_->flush();
}

void TensorBoardLog::moe_losses(int64_t iteration, const std::vector<MoELayerReport>& layers) {
  const std::string lb = load_balancing_tag(moe_.load_balancing);
  if (!lb.empty()) writer_->add_scalar(lb, mean_over_layers(layers, &MoEStats::aux_loss, moe_.aux_loss_coeff), iteration);
  if (moe_.z_loss_coeff > 0)
    writer_->add_scalar("z_loss", mean_over_layers(layers, &MoEStats::z_loss, moe_.z_loss_coeff), iteration);
}

void TensorBoardLog::timers(int64_t iteration, double seconds_per_iteration, double tflops_per_rank) {
  if (!args_.timers) return;
  writer_->add_scalar("iteration-time", seconds_per_iteration, iteration);
  if (args_.throughput) writer_->add_scalar("throughput", tflops_per_rank, iteration);
  writer_->flush();
}

void TensorBoardLog::validation(int64_t iteration, int64_t consumed_samples, double loss) {
  writer_->add_scalar("lm loss validation", loss, iteration);
  writer_->add_scalar("lm loss validation vs samples", loss, consumed_samples);
  if (args_.validation_ppl) {
    const double ppl = std::exp(std::min(20.0, loss));
    writer_->add_scalar("lm loss validation ppl", ppl, iteration);
    writer_->add_scalar("lm loss validation ppl vs samples", ppl, consumed_samples);
  }
  writer_->flush();
}

}  // namespace megadlm
