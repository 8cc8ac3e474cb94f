#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>

#include "core/error.h"
#include "parallel/p2p.h"
#include "parallel/tp_mappings.h"

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
  PreparedBatch batch;
  StageBuffer input;  // [N, C] from the previous stage (empty on the first stage)
};

// Floats of one activation between stages: [N, C], or [N/tp, C] under sequence parallelism.
int64_t activation_floats(const ParallelContext& ctx, const MicroBatch& mb, const LanguageModel& model) {
  return local_rows(ctx, mb.B * mb.T) * model.config().hidden_size;
}

// Runs the schedule on one stage; the state that the forward and backward steps share.
class OneFOneB {
 public:
  OneFOneB(LanguageModel& model, const ParallelContext& ctx, const PrepareMicroBatch& prepare, float grad_scale)
      : model_(model), ctx_(ctx), dev_(model.device()), prepare_(prepare), grad_scale_(grad_scale) {}

  double run(int64_t M) {
    const int64_t warmup = std::min<int64_t>(M, ctx_.pp.size - ctx_.pp.rank - 1);
    const int64_t remaining = M - warmup;
    for (int64_t i = 0; i < warmup; ++i) {
      InFlight& f = start_forward();
      Tensor out = model_.forward_stage(f.batch.micro_batch(), input_of(f));
      p2p::send_forward(ctx_, dev_, out.data<float>(), out.numel(), f.m);
      model_.arena().reset();  // recomputed before the backward
    }
    if (remaining > 0) start_forward();
    for (int64_t i = 0; i < remaining; ++i) {
      InFlight& f = in_flight_.back();
      Tensor out = model_.forward_stage(f.batch.micro_batch(), input_of(f));
      const int64_t n = out.numel();
      const int64_t mb = in_flight_.front().m;
      if (!model_.is_last_stage()) {
        out_grad_.resize(dev_, n);
        p2p::send_forward_recv_backward(ctx_, dev_, out.data<float>(), f.m, out_grad_.data(), mb, n);
        model_.arena().reset();
        out = Tensor();
      }
      backward_oldest(out);
      if (i == remaining - 1) {
        p2p::send_backward(ctx_, dev_, in_grad_.data(), n, mb);
      } else {
        InFlight& next = push_next();
        next.input.resize(dev_, model_.is_first_stage() ? 0 : n);
        p2p::send_backward_recv_forward(ctx_, dev_, in_grad_.data(), mb, next.input.data(), next.m, n);
      }
    }
    for (int64_t i = 0; i < warmup; ++i) {
      const InFlight& f = in_flight_.front();
      const int64_t n = activation_floats(ctx_, f.batch.micro_batch(), model_), mb = f.m;
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
    if (!model_.is_first_stage()) {
      f.input.resize(dev_, activation_floats(ctx_, f.batch.micro_batch(), model_));
      p2p::recv_forward(ctx_, dev_, f.input.data(), f.input.size(), f.m);
    }
    return f;
  }
  const float* input_of(const InFlight& f) const { return f.input.data(); }

  // Backward of the oldest in-flight micro-batch into in_grad_. `out` is its stage output when the
  // forward just ran (last stage); otherwise the forward is recomputed from the saved input.
  void backward_oldest(Tensor out) {
    InFlight& f = in_flight_.front();
    const MicroBatch mb = f.batch.micro_batch();
    if (!out.defined() || out.numel() == 0) out = model_.forward_stage(mb, input_of(f));
    in_grad_.resize(dev_, model_.is_first_stage() ? 0 : out.numel());
    const double loss = model_.backward_stage(mb, out, model_.is_last_stage() ? nullptr : out_grad_.data(),
                                              grad_scale_, in_grad_.data());
    loss_ += loss;  // in micro-batch order, as the single-process loop adds them
    in_flight_.pop_front();
  }

  LanguageModel& model_;
  const ParallelContext& ctx_;
  const Device dev_;  // where the model's activations live
  const PrepareMicroBatch& prepare_;
  float grad_scale_;
  std::deque<InFlight> in_flight_;
  int64_t next_forward_ = 0;
  StageBuffer out_grad_, in_grad_;
  double loss_ = 0;
};

void broadcast_from_last_stage(const ParallelContext& ctx, double& value) {
  if (ctx.pp.size > 1) ctx.pp.communicator().broadcast(&value, sizeof value, ctx.pp.size - 1);
}

}  // namespace

void reduce_shared_embedding_grads(LanguageModel& model, const ParallelContext& ctx) {
  const int id = model.shared_embedding_id();
  if (id < 0 || ctx.embd.size <= 1) return;
  Tensor g = model.params().grad(id);
  ctx.embd.communicator(g.device()).all_reduce_sum(g.data<float>(), g.numel());
}

double pipeline_1f1b_step(LanguageModel& model, const ParallelContext& ctx, int64_t num_micro_batches,
                          const PrepareMicroBatch& prepare, float grad_scale) {
  MEGADLM_CHECK(num_micro_batches >= 1, "a pipeline step needs at least one micro-batch, got ", num_micro_batches);
  double loss = OneFOneB(model, ctx, prepare, grad_scale).run(num_micro_batches);
  reduce_shared_embedding_grads(model, ctx);
  broadcast_from_last_stage(ctx, loss);
  return loss;
}

double pipeline_forward_loss(LanguageModel& model, const ParallelContext& ctx, const MicroBatch& mb) {
  const int64_t n = activation_floats(ctx, mb, model);
  const Device dev = model.device();
  StageBuffer input;
  input.resize(dev, model.is_first_stage() ? 0 : n);
  p2p::recv_forward(ctx, dev, input.data(), n, 0);
  Tensor out = model.forward_stage(mb, input.data());
  double loss = 0;
  if (model.is_last_stage()) {
    loss = model.loss_stage(mb, out);
  } else {
    p2p::send_forward(ctx, dev, out.data<float>(), n, 0);
    model.arena().reset();
  }
  broadcast_from_last_stage(ctx, loss);
  return loss;
}

}  // namespace megadlm
