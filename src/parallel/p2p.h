#pragma once
// Point-to-point transfers between neighbouring pipeline stages over ctx.pp, in the combined forms
// the 1F1B schedule uses (Megatron's p2p_communication): activations go to the next stage, their
// gradients come back. Every call is a no-op at the end of the pipeline that has no such neighbour.
//
// Communicator::send is blocking (a large MPI_Send waits for its receive), so an exchange in which
// both neighbours send orders its halves: the lower stage sends first, the upper one receives first.
// Tags are the micro-batch index and the direction, so a message can never be taken for another.
// The buffers live on `device` (the model's): host buffers go over MPI, a GPU's over the pp group's
// device communicator (NCCL, which ignores tags and orders the messages per peer, as the schedule
// posts them).
// Legend: n = floats of one activation (N*C).
#include <cstdint>

#include "parallel/parallel_context.h"

namespace megadlm::p2p {

int forward_tag(int64_t micro_batch);   // activation of micro-batch m, stage s -> s+1
int backward_tag(int64_t micro_batch);  // its gradient, stage s+1 -> s

// x [n] of micro-batch m to the next stage / from the previous stage.
void send_forward(const ParallelContext& ctx, Device device, const float* x, int64_t n, int64_t m);
void recv_forward(const ParallelContext& ctx, Device device, float* x, int64_t n, int64_t m);
// dx [n] of micro-batch m to the previous stage / dy [n] from the next stage.
void send_backward(const ParallelContext& ctx, Device device, const float* dx, int64_t n, int64_t m);
void recv_backward(const ParallelContext& ctx, Device device, float* dy, int64_t n, int64_t m);
// With the next stage: x of micro-batch m_send out, dy of micro-batch m_recv in.
void send_forward_recv_backward(const ParallelContext& ctx, Device device, const float* x, int64_t m_send,
                                float* dy, int64_t m_recv, int64_t n);
// With the previous stage: dx of micro-batch m_send out, x of micro-batch m_recv in.
void send_backward_recv_forward(const ParallelContext& ctx, Device device, const float* dx, int64_t m_send,
                                float* x, int64_t m_recv, int64_t n);

}  // namespace megadlm::p2p
