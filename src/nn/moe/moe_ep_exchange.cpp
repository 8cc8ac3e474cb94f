#include "nn/moe/moe_ep_exchange.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

ExpertExchange::ExpertExchange(const ParallelContext& ctx, int64_t num_experts, int64_t hidden)
    : ctx_(&ctx), ep_(ctx.ep.size), rank_(ctx.ep.rank), E_(num_experts), C_(hidden) {
  MEGADLM_CHECK(E_ % ep_ == 0, "--num-experts ", E_, " is not divisible by --expert-model-parallel-size ", ep_);
  El_ = E_ / ep_;
}

void ExpertExchange::exchange(Device device, const float* in, const std::vector<int64_t>& send_rows, float* out,
                              const std::vector<int64_t>& recv_rows) {
  std::vector<int64_t> sc(static_cast<size_t>(ep_)), rc(static_cast<size_t>(ep_));
  for (int r = 0; r < ep_; ++r) {
    sc[r] = send_rows[r] * C_;
    rc[r] = recv_rows[r] * C_;
  }
  ctx_->ep.communicator(device).all_to_all_v(in, sc.data(), out, rc.data());
}

void ExpertExchange::regroup(Device device, const float* in, float* out, bool to_expert_major) const {
  const Backend& be = backend_for(device);
  // Offsets of block (s, j) in source-major and expert-major orders.
  std::vector<int64_t> src_major(static_cast<size_t>(ep_ * El_)), exp_major(static_cast<size_t>(ep_ * El_));
  int64_t at = 0;
  for (int s = 0; s < ep_; ++s)
    for (int64_t j = 0; j < El_; ++j) src_major[s * El_ + j] = at, at += counts_[s * El_ + j];
  at = 0;
  for (int64_t j = 0; j < El_; ++j)
    for (int s = 0; s < ep_; ++s) exp_major[s * El_ + j] = at, at += counts_[s * El_ + j];
  for (int64_t b = 0; b < ep_ * El_; ++b) {
    const int64_t from = to_expert_major ? src_major[b] : exp_major[b];
    const int64_t to = to_expert_major ? exp_major[b] : src_major[b];
    if (counts_[b] > 0)
      be.copy(out + to * C_, in + from * C_, sizeof(float) * static_cast<size_t>(counts_[b] * C_));
  }
}

Tensor ExpertExchange::send_to_experts(Arena& arena, const Tensor& xp, const std::vector<int64_t>& offsets,
                                       std::vector<int64_t>& local_offsets) {
  MEGADLM_CHECK(static_cast<int64_t>(offsets.size()) == E_ + 1, "expert exchange: ", offsets.size() - 1,
                " expert segments, expected ", E_);
  P_ = offsets.back();
  // Per-expert row counts to the owners: rank r receives, from every source, the counts of its El experts.
  std::vector<float> mine(static_cast<size_t>(E_)), theirs(static_cast<size_t>(ep_ * El_));
  for (int64_t e = 0; e < E_; ++e) mine[e] = static_cast<float>(offsets[e + 1] - offsets[e]);
  std::vector<int64_t> per(static_cast<size_t>(ep_), El_);
  ctx_->ep.communicator().all_to_all_v(mine.data(), per.data(), theirs.data(), per.data());  // host counts
  counts_.assign(static_cast<size_t>(ep_ * El_), 0);
  send_rows_.assign(static_cast<size_t>(ep_), 0);
  recv_rows_.assign(static_cast<size_t>(ep_), 0);
  for (int r = 0; r < ep_; ++r) send_rows_[r] = offsets[(r + 1) * El_] - offsets[r * El_];
  Q_ = 0;
  for (int s = 0; s < ep_; ++s)
    for (int64_t j = 0; j < El_; ++j) {
      counts_[s * El_ + j] = static_cast<int64_t>(theirs[s * El_ + j]);
      recv_rows_[s] += counts_[s * El_ + j];
      Q_ += counts_[s * El_ + j];
    }
  Tensor recv = arena.tensor({std::max<int64_t>(Q_, 1), C_});
  exchange(xp.device(), xp.data<float>(), send_rows_, recv.data<float>(), recv_rows_);
  Tensor xl = arena.tensor({Q_, C_});
  regroup(xp.device(), recv.data<float>(), xl.data<float>(), true);
  local_offsets.assign(static_cast<size_t>(El_ + 1), 0);
  for (int64_t j = 0; j < El_; ++j) {
    int64_t n = 0;
    for (int s = 0; s < ep_; ++s) n += counts_[s * El_ + j];
    local_offsets[j + 1] = local_offsets[j] + n;
  }
  return xl;
}

Tensor ExpertExchange::return_from_experts(Arena& arena, const Tensor& outl) {
  Tensor src = arena.tensor({std::max<int64_t>(Q_, 1), C_});
  regroup(outl.device(), outl.data<float>(), src.data<float>(), false);
  Tensor out = arena.tensor({P_, C_});
  exchange(outl.device(), src.data<float>(), recv_rows_, out.data<float>(), send_rows_);
  return out;
}

Tensor ExpertExchange::gradients_to_experts(Arena& arena, const Tensor& dout) {
  Tensor recv = arena.tensor({std::max<int64_t>(Q_, 1), C_});
  exchange(dout.device(), dout.data<float>(), send_rows_, recv.data<float>(), recv_rows_);
  Tensor doutl = arena.tensor({Q_, C_});
  regroup(dout.device(), recv.data<float>(), doutl.data<float>(), true);
  return doutl;
}

void ExpertExchange::gradients_from_experts(Arena& arena, const Tensor& dxl, Tensor& dxp) {
  const size_t mark = arena.mark();
  Tensor src = arena.tensor({std::max<int64_t>(Q_, 1), C_});
  regroup(dxl.device(), dxl.data<float>(), src.data<float>(), false);
  exchange(dxl.device(), src.data<float>(), recv_rows_, dxp.data<float>(), send_rows_);
  arena.release(mark);
}

}  // namespace megadlm
