#include "nn/vision_projector.h"

#include "nn/gelu_exact.h"

namespace megadlm {

VisionProjector::VisionProjector(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                                 ProjectorType type, int64_t vision_hidden, int64_t text_hidden, float init_std)
    : type_(type) {
  MEGADLM_CHECK(ctx.tp.size == 1, name, ": the projector is built for one rank (no tensor parallelism yet)");
  linear_1_ = Linear(store, ctx, name + ".linear_1", vision_hidden, text_hidden, true, init_std);
  if (type == ProjectorType::Mlp2xGelu)
    linear_2_ = Linear(store, ctx, name + ".linear_2", text_hidden, text_hidden, true, init_std);
}

Tensor VisionProjector::forward(Arena& arena, const Tensor& x) {
  if (type_ == ProjectorType::Linear) return linear_1_.forward(arena, x);
  h_ = linear_1_.forward(arena, x);
  Tensor a = arena.tensor(h_.shape());
  gelu_exact_forward(a, h_);
  return linear_2_.forward(arena, a);
}

void VisionProjector::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  if (type_ == ProjectorType::Linear) return linear_1_.backward(dy, dx, false);
  const size_t mark = arena.mark();
  Tensor dh = arena.tensor(h_.shape());
  linear_2_.backward(dy, dh, false);
  gelu_exact_backward(dh, h_, dh);
  linear_1_.backward(dh, dx, false);
  arena.release(mark);
}

}  // namespace megadlm
