#include "nn/t5_feed_forward.h"

#include "kernels/backend.h"

namespace megadlm {

T5FeedForwardBlock::T5FeedForwardBlock(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                                       const TransformerConfig& cfg, T5FeedForward kind)
    : kind_(kind) {
  const int64_t C = cfg.hidden_size, F = cfg.ffn_hidden_size;
  const float std = cfg.init_method_std;
  if (kind == T5FeedForward::Relu) {
    wi_ = Linear(store, ctx, name + ".wi", C, F, false, std);
  } else {
    wi_ = Linear(store, ctx, name + ".wi_0", C, F, false, std);
    wi_1_ = Linear(store, ctx, name + ".wi_1", C, F, false, std);
  }
  wo_ = Linear(store, ctx, name + ".wo", F, C, false, std, LinearParallel::Row);
}

Tensor T5FeedForwardBlock::forward(Arena& arena, const Tensor& x) {
  MEGADLM_CHECK(x.device() == Device::CPU, "T5's feed-forward runs on the CPU only (docs/t5.md)");
  h_ = wi_.forward(arena, x);
  const int64_t n = h_.numel();
  const float* h = h_.data<float>();
  Tensor a = arena.tensor(h_.shape());
  float* av = a.data<float>();
  if (kind_ == T5FeedForward::Relu) {
    for (int64_t i = 0; i < n; ++i) av[i] = h[i] > 0.0f ? h[i] : 0.0f;
  } else {
    u_ = wi_1_.forward_shared_input(arena, x, wi_);  // one narrow copy of x for both
    g_ = arena.tensor(h_.shape());
    backend_of(x).gelu_forward(g_.data<float>(), h, n);
    const float* u = u_.data<float>();
    const float* g = g_.data<float>();
    for (int64_t i = 0; i < n; ++i) av[i] = g[i] * u[i];
  }
  return wo_.forward(arena, a);
}

void T5FeedForwardBlock::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  const size_t mark = arena.mark();
  const int64_t n = h_.numel();
  const float* h = h_.data<float>();
  Tensor da = arena.tensor(h_.shape());
  wo_.backward(dy, da, false);
  float* d = da.data<float>();
  if (kind_ == T5FeedForward::Relu) {
    for (int64_t i = 0; i < n; ++i) d[i] = h[i] > 0.0f ? d[i] : 0.0f;  // da -> dh in place
    wi_.backward(da, dx, false);
  } else {
    // d(g * u): dg = da * u (then through the GELU), du = da * g.
    Tensor du = arena.tensor(h_.shape());
    const float* u = u_.data<float>();
    const float* g = g_.data<float>();
    float* dup = du.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      dup[i] = d[i] * g[i];
      d[i] *= u[i];
    }
    backend_of(dy).gelu_backward(d, h, d, n);  // dh = gelu'(h) * dg, in place
    wi_.backward(da, dx, false);
    wi_1_.backward(du, dx, true);
  }
  arena.release(mark);
}

}  // namespace megadlm
