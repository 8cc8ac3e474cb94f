#include "train/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "core/error.h"
#include "parallel/p2p.h"

namespace megadlm {

namespace {

// floats on the model's device (host memory on the CPU), for what crosses between stages; grown, never
// shrunk. Empty (null data) until sized.
class StageBuffer {
 public:
  float* resize(Device device, int64_t n) {
    if (n > capacity_) {
      t_ = Tensor::empty({n}, DType::F32, device);
      capacity_ = n;
    }
    n_ = n;
    return data();
  }
  float* data() const { return n_ > 0 ? t_.data<float>() : nullptr; }
  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  Tensor t_;
  int64_t capacity_ = 0, n_ = 0;
};

// A micro-batch between its forward and its backward on this stage.
struct InFlight {
  int64_t m = 0;
  MicroBatch batch;
  StageBuffer input;  // [N, C] from the previous stage (empty on the first stage)
};

// Runs the schedule on one stage; the state that the forward and backward steps share.
class OneFOneB {
 public:
  OneFOneB(PipelineStage& stage, const ParallelContext& ctx, const PrepareMicroBatch& prepare, float grad_scale)
      : stage_(stage), ctx_(ctx), dev_(stage.device()), prepare_(prepare), grad_scale_(grad_scale) {}

  double run(int64_t M) {
    const int64_t warmup = std::min<int64_t>(M, ctx_.pp.size - ctx_.pp.rank - 1);
    const int64_t remaining = M - warmup;
    for (int64_t i = 0; i < warmup; ++i) {
      InFlight& f = start_forward();
      Tensor out = stage_.forward_stage(f.batch, input_of(f));
      p2p::send_forward(ctx_, dev_, out.data<float>(), out.numel(), f.m);
      stage_.release_activations();  // recomputed before the backward
    }
    if (remaining > 0) start_forward();
    for (int64_t i = 0; i < remaining; ++i) {
      InFlight& f = in_flight_.back();
      Tensor out = stage_.forward_stage(f.batch, input_of(f));
      const int64_t n = out.numel();
      const int64_t mb = in_flight_.front().m;
      if (!stage_.is_last_stage()) {
        out_grad_.resize(dev_, n);
        p2p::send_forward_recv_backward(ctx_, dev_, out.data<float>(), f.m, out_grad_.data(), mb, n);
        stage_.release_activations();
        out = Tensor();
      }
      backward_oldest(out);
      if (i == remaining - 1) {
        p2p::send_backward(ctx_, dev_, in_grad_.data(), n, mb);
      } else {
        InFlight& next = push_next();
        next.input.resize(dev_, stage_.is_first_stage() ? 0 : n);
        p2p::send_backward_recv_forward(ctx_, dev_, in_grad_.data(), mb, next.input.data(), next.m, n);
      }
    }
    for (int64_t i = 0; i < warmup; ++i) {
      const InFlight& f = in_flight_.front();
      const int64_t n = stage_.activation_floats(f.batch), mb = f.m;
      out_grad_.resize(dev_, n);
      p2p::recv_backward(ctx_, dev_, out_grad_.data(), n, mb);
      backward_oldest(Tensor());
      p2p::send_backward(ctx_, dev_, in_grad_.data(), n, mb);
    }
    return loss_;
  }

 private:
  // A new in-flight micro-batch (the next one in order), prepared; its input not yet received.
  InFlight& push_next() {
    in_flight_.emplace_back();
    InFlight& f = in_flight_.back();
    f.m = next_forward_++;
    prepare_(f.m, f.batch);
    return f;
  }
  InFlight& start_forward() {
    InFlight& f = push_next();
    if (!stage_.is_first_stage()) {
      f.input.resize(dev_, stage_.activation_floats(f.batch));
      p2p::recv_forward(ctx_, dev_, f.input.data(), f.input.size(), f.m);
    }
    return f;
  }
  const float* input_of(const InFlight& f) const { return f.input.data(); }

  // Backward of the oldest in-flight micro-batch into in_grad_. `out` is its stage output when the
  // forward just ran (last stage); otherwise the forward is recomputed from the saved input.
  void backward_oldest(Tensor out) {
    InFlight& f = in_flight_.front();
    const MicroBatch& mb = f.batch;
    if (!out.defined() || out.numel() == 0) out = stage_.forward_stage(mb, input_of(f));
    in_grad_.resize(dev_, stage_.is_first_stage() ? 0 : out.numel());
    const double loss = stage_.backward_stage(mb, out, stage_.is_last_stage() ? nullptr : out_grad_.data(),
                                              grad_scale_, in_grad_.data());
    loss_ += loss;  // in micro-batch order, as the single-process loop adds them
    in_flight_.pop_front();
  }

  PipelineStage& stage_;
  const ParallelContext& ctx_;
  const Device dev_;  // where the model's activations live
  const PrepareMicroBatch& prepare_;
  float grad_scale_;
  std::deque<InFlight> in_flight_;
  int64_t next_forward_ = 0;
  StageBuffer out_grad_, in_grad_;
  double loss_ = 0;
};

}  // namespace

void broadcast_from_last_stage(const ParallelContext& ctx, double* v, int n) {
  if (ctx.pp.size > 1) ctx.pp.communicator().broadcast(v, sizeof(double) * static_cast<size_t>(n), ctx.pp.size - 1);
}

void reduce_shared_gradient(PipelineStage& stage, const ParallelContext& ctx) {
  Tensor g = stage.shared_gradient();
  if (!g.defined() || ctx.embd.size <= 1) return;
  ctx.embd.communicator(g.device()).all_reduce_sum(g.data<float>(), g.numel());
}

double pipeline_1f1b_step(PipelineStage& stage, const ParallelContext& ctx, int64_t num_micro_batches,
                          const PrepareMicroBatch& prepare, float grad_scale) {
  MEGADLM_CHECK(num_micro_batches >= 1, "a pipeline step needs at least one micro-batch, got ", num_micro_batches);
  double loss = OneFOneB(stage, ctx, prepare, grad_scale).run(num_micro_batches);
  reduce_shared_gradient(stage, ctx);
  broadcast_from_last_stage(ctx, &loss, 1);
  return loss;
}

void pipeline_forward(PipelineStage& stage, const ParallelContext& ctx, const MicroBatch& mb,
                      const std::function<void(const Tensor& out)>& last) {
  const int64_t n = stage.activation_floats(mb);
  const Device dev = stage.device();
  StageBuffer input;
  input.resize(dev, stage.is_first_stage() ? 0 : n);
  p2p::recv_forward(ctx, dev, input.data(), n, 0);
  Tensor out = stage.forward_stage(mb, input.data());
  if (stage.is_last_stage()) last(out);
  else p2p::send_forward(ctx, dev, out.data<float>(), n, 0);
  stage.release_activations();
}

double pipeline_forward_loss(PipelineStage& stage, const ParallelContext& ctx, const MicroBatch& mb) {
  double loss = 0;
  pipeline_forward(stage, ctx, mb, [&](const Tensor& out) { loss = stage.loss_stage(mb, out); });
  broadcast_from_last_stage(ctx, &loss, 1);
  return loss;
}

}  // namespace megadlm
