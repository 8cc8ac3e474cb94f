#pragma once
// The 1F1B pipeline schedule (Megatron's forward_backward_pipelining_without_interleaving): over the
// M micro-batches of one global batch, stage s of pp runs min(M, pp - s - 1) warm-up forwards, then
// one forward and one backward in turn, then the remaining backwards. Activations go down the
// pipeline and their gradients come back through ctx.pp (parallel/p2p.h).
//
// Every stage prepares each micro-batch itself, in order, from the same global sample ids: the
// objectives derive inputs, targets and the diffusion masks from the counter-based RNG, so only
// activations and gradients travel, never tokens or masks.
//
// The schedule drives a PipelineStage (models/pipeline_stage.h), not a particular model.
//
// Activation storage: the layers keep their saved activations in members (one micro-batch at a
// time), so a stage keeps, per in-flight micro-batch, its prepared batch and its input activation
// [N, C] (at most pp - s of them), and before the backward of micro-batch m it recomputes its
// forward from that input into the model's arena (Megatron's full recomputation, per stage). The last
// stage runs forward and backward of a micro-batch back to back and recomputes nothing. Results are
// bitwise those of the single-process forward_backward: the same operations on the same values.
#include <cstdint>
#include <functional>

#include "models/micro_batch.h"
#include "models/pipeline_stage.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// Fills micro-batch m (0 <= m < M) of the current global batch; called once per micro-batch, in order.
// `out` is the schedule's object for m, at one address until m's backward, and the very object the
// stage's forward_stage / backward_stage of m receive: what m's forwards need (LLaVA's images) travels
// in it.
using PrepareMicroBatch = std::function<void(int64_t m, MicroBatch& out)>;

// One global batch through this stage: gradients accumulated into the stage's parameters (dlogits
// scaled by grad_scale), the shared gradient (the tied embedding's two copies) summed over ctx.embd.
// Returns the sum of the micro-batch losses, the same on every stage of the pipeline (broadcast from
// the last).
double pipeline_1f1b_step(PipelineStage& stage, const ParallelContext& ctx, int64_t num_micro_batches,
                          const PrepareMicroBatch& prepare, float grad_scale);

// Forward only (evaluation) of one micro-batch through the pipeline; the loss on every stage.
double pipeline_forward_loss(PipelineStage& stage, const ParallelContext& ctx, const MicroBatch& mb);

// Forward only of one micro-batch through the pipeline: on the last stage `last` is called with the
// stage's output (forward_stage's, in the model's arena, freed after it returns); nothing is
// broadcast (broadcast_from_last_stage does).
void pipeline_forward(PipelineStage& stage, const ParallelContext& ctx, const MicroBatch& mb,
                      const std::function<void(const Tensor& out)>& last);

// v[n] of the last stage on every stage of the pipeline (the losses that only it computes); nothing
// with one stage.
void broadcast_from_last_stage(const ParallelContext& ctx, double* v, int n);

// Sums the gradient that the first and the last stage share (tied embeddings, pp > 1) over ctx.embd;
// nothing otherwise. pipeline_1f1b_step calls it.
void reduce_shared_gradient(PipelineStage& stage, const ParallelContext& ctx);

}  // namespace megadlm
