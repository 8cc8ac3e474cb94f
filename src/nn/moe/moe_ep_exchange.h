#pragma once
// Expert parallelism's token exchange (--expert-model-parallel-size): the E experts are split over the
// ep group, rank r owning experts [r El, (r+1) El), El = E / ep. After the dispatcher has grouped this
// rank's rows by expert (xp [P, C], offsets [E+1]), the segments of rank r's experts are sent to rank
// r by all_to_all_v; the received rows are regrouped by local expert (each expert's rows from source
// rank 0, then 1, ...), run through the local experts, put back in source order and returned by the
// reverse all_to_all_v. The backward moves gradients along the same paths. The row counts are host
// numbers over the ep group's MPI communicator; the rows themselves may live on a device
// (--device cuda), and then go over the group's device communicator and are regrouped by the backend.
// Legend: P rows dispatched by this rank, Q rows this rank's experts process, C hidden.
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "parallel/parallel_context.h"

namespace megadlm {

class ExpertExchange {
 public:
  ExpertExchange() = default;
  ExpertExchange(const ParallelContext& ctx, int64_t num_experts, int64_t hidden);

  int64_t local_experts() const { return El_; }
  int64_t first_expert() const { return static_cast<int64_t>(rank_) * El_; }

  // xp [P, C] grouped by global expert (offsets [E+1]) -> xl [Q, C] grouped by local expert, with
  // local_offsets [El+1]. Remembers the counts for the way back. Collective over ep.
  Tensor send_to_experts(Arena& arena, const Tensor& xp, const std::vector<int64_t>& offsets,
                         std::vector<int64_t>& local_offsets);
  // outl [Q, C] (local-expert order) -> out [P, C] (this rank's dispatch order). Collective over ep.
  Tensor return_from_experts(Arena& arena, const Tensor& outl);
  // The backward of return_from_experts: dout [P, C] -> doutl [Q, C]; and of send_to_experts:
  // dxl [Q, C] -> dxp [P, C] (written; staging from the arena).
  Tensor gradients_to_experts(Arena& arena, const Tensor& dout);
  void gradients_from_experts(Arena& arena, const Tensor& dxl, Tensor& dxp);

 private:
  // in (rank-major: chunk for rank 0, 1, ...) -> out rank-major, with the given row counts; both on
  // `device`.
  void exchange(Device device, const float* in, const std::vector<int64_t>& send_rows, float* out,
                const std::vector<int64_t>& recv_rows);
  // Between source-major [s][j] and expert-major [j][s] orders of the received rows (on `device`).
  void regroup(Device device, const float* in, float* out, bool to_expert_major) const;

  const ParallelContext* ctx_ = nullptr;  // its ep group: the counts over MPI, the rows by their device
  int ep_ = 1, rank_ = 0;
  int64_t E_ = 0, El_ = 0, C_ = 0;
  std::vector<int64_t> send_rows_;   // [ep] rows this rank sends to each rank (its experts' segments)
  std::vector<int64_t> recv_rows_;   // [ep] rows received from each rank
  std::vector<int64_t> counts_;      // [ep * El] rows from source s for local expert j, at s * El + j
  int64_t P_ = 0, Q_ = 0;
};

}  // namespace megadlm
