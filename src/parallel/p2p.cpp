#include "parallel/p2p.h"

namespace megadlm::p2p {

namespace {

// MPI guarantees tags up to 32767; micro-batch indices wrap far beyond any number in flight.
constexpr int64_t kTagPeriod = 16384;

bool has_next(const ParallelContext& ctx) { return ctx.pp.rank + 1 < ctx.pp.size; }
bool has_prev(const ParallelContext& ctx) { return ctx.pp.rank > 0; }
int64_t bytes(int64_t n) { return n * static_cast<int64_t>(sizeof(float)); }

}  // namespace

int forward_tag(int64_t m) { return static_cast<int>(2 * (m % kTagPeriod)); }
int backward_tag(int64_t m) { return static_cast<int>(2 * (m % kTagPeriod) + 1); }

void send_forward(const ParallelContext& ctx, Device device, const float* x, int64_t n, int64_t m) {
  if (has_next(ctx)) ctx.pp.communicator(device).send(x, bytes(n), ctx.pp.rank + 1, forward_tag(m));
}

void recv_forward(const ParallelContext& ctx, Device device, float* x, int64_t n, int64_t m) {
  if (has_prev(ctx)) ctx.pp.communicator(device).recv(x, bytes(n), ctx.pp.rank - 1, forward_tag(m));
}

void send_backward(const ParallelContext& ctx, Device device, const float* dx, int64_t n, int64_t m) {
  if (has_prev(ctx)) ctx.pp.communicator(device).send(dx, bytes(n), ctx.pp.rank - 1, backward_tag(m));
}

void recv_backward(const ParallelContext& ctx, Device device, float* dy, int64_t n, int64_t m) {
  if (has_next(ctx)) ctx.pp.communicator(device).recv(dy, bytes(n), ctx.pp.rank + 1, backward_tag(m));
}

// The lower stage of the pair sends first ...
void send_forward_recv_backward(const ParallelContext& ctx, Device device, const float* x, int64_t m_send,
                                float* dy, int64_t m_recv, int64_t n) {
  send_forward(ctx, device, x, n, m_send);
  recv_backward(ctx, device, dy, n, m_recv);
}

// ... and the upper one receives first, so the pair never waits on two sends.
void send_backward_recv_forward(const ParallelContext& ctx, Device device, const float* dx, int64_t m_send,
                                float* x, int64_t m_recv, int64_t n) {
  recv_forward(ctx, device, x, n, m_recv);
  send_backward(ctx, device, dx, n, m_send);
}

}  // namespace megadlm::p2p
