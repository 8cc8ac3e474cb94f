#pragma once
// One pipeline stage of a model, as the pipeline schedule (train/pipeline_schedule.h) drives it: a
// micro-batch at a time, forward from the previous stage's activation (or from the tokens on the first
// stage), backward from the next stage's gradient (or from the loss on the last). Activations between
// stages are [N, C] (N/tp rows under sequence parallelism) on the stage's device. Each stage builds
// every micro-batch itself from the same samples, so only activations and their gradients travel.
#include <cstdint>

#include "core/tensor.h"
#include "models/micro_batch.h"

namespace megadlm {

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual Device device() const = 0;
  virtual bool is_first_stage() const = 0;
  virtual bool is_last_stage() const = 0;
  // Floats of the activation that crosses to or from this stage for mb.
  virtual int64_t activation_floats(const MicroBatch& mb) const = 0;
  // Forward of this stage: from mb on the first stage, else from `input` (copied; the caller's buffer
  // may be reused). Returns the stage's output; on the last stage what the loss is computed from.
  virtual Tensor forward_stage(const MicroBatch& mb, const float* input) = 0;
  // Backward of the forward_stage just run (no other forward in between). The last stage starts from
  // the loss (returned; output_grad unused), the others from output_grad. Writes input_grad on a
  // stage that is not the first; accumulates parameter gradients (dlogits scaled by grad_scale);
  // frees the micro-batch's activations.
  virtual double backward_stage(const MicroBatch& mb, const Tensor& out, const float* output_grad, float grad_scale,
                                float* input_grad, float* per_token_loss = nullptr) = 0;
  // Last stage, forward only: the loss of `out`; frees the activations.
  virtual double loss_stage(const MicroBatch& mb, const Tensor& out, float* per_token_loss = nullptr) = 0;
  // Frees what a forward_stage left (a micro-batch whose backward recomputes its forward).
  virtual void release_activations() = 0;
  // The gradient of the parameter this stage shares with another stage (the tied word embeddings of the
  // first and the last stage), which the schedule sums over the embedding group; undefined when none.
  virtual Tensor shared_gradient() = 0;
};

}  // namespace megadlm
