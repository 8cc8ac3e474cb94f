#include "parallel/communicator.h"

#include <cstring>

#include "core/error.h"

namespace megadlm {

CommRequest Communicator::send_recv_async(const void*, int64_t, int, void*, int64_t, int, int) {
  fail("the ", name_, " group's communicator has no non-blocking send/receive (context parallelism's ring needs it)");
}

CommRequest SelfCommunicator::send_recv_async(const void* send, int64_t send_bytes, int dst, void* recv,
                                              int64_t recv_bytes, int src, int) {
  MEGADLM_CHECK(dst == 0 && src == 0 && send_bytes == recv_bytes, name_, ": send_recv_async in a group of one must ",
                "exchange with itself, equal sizes (dst ", dst, ", src ", src, ", ", send_bytes, " / ", recv_bytes,
                " bytes)");
  if (send != recv) std::memmove(recv, send, static_cast<size_t>(send_bytes));
  return {};
}

void SelfCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  if (in != out) std::memmove(out, in, static_cast<size_t>(n) * sizeof(float));
}

void SelfCommunicator::all_gather(const float* in, float* out, int64_t n) {
  if (in != out) std::memmove(out, in, static_cast<size_t>(n) * sizeof(float));
}

void SelfCommunicator::send(const void*, int64_t, int dst, int) {
  fail("send to rank ", dst, " in a group of size 1 (", name_, ")");
}

void SelfCommunicator::recv(void*, int64_t, int src, int) {
  fail("recv from rank ", src, " in a group of size 1 (", name_, ")");
}

void SelfCommunicator::all_to_all_v(const float* send, const int64_t* send_counts, float* recv,
                                    const int64_t* recv_counts) {
  MEGADLM_CHECK(send_counts[0] == recv_counts[0], name_, ": all_to_all_v of one rank sends ", send_counts[0],
                " floats but receives ", recv_counts[0]);
  if (send != recv) std::memmove(recv, send, static_cast<size_t>(send_counts[0]) * sizeof(float));
}

}  // namespace megadlm
