#include "nn/vision_projector.h"

#include "nn/gelu_exact.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

VisionProjector::VisionProjector(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                                 ProjectorType type, int64_t vision_hidden, int64_t text_hidden, float init_std)
    : type_(type) {
  MEGADLM_CHECK(!sequence_parallel(ctx), name, ": the projector's rows are the images' patches, never split by ",
                "--sequence-parallel (give it the vision tower's context)");
  if (type == ProjectorType::Linear) {
    // Replicated: every tp rank holds the whole map and computes all of y (its gradients agree across the
    // ranks, whose inputs and output gradients do).
    static const ParallelContext one_rank = ParallelContext::single();
    linear_1_ = Linear(store, one_rank, name + ".linear_1", vision_hidden, text_hidden, true, init_std);
    return;
  }
  MEGADLM_CHECK(text_hidden % ctx.tp.size == 0, name, ": mlp2x_gelu under --tensor-model-parallel-size ", ctx.tp.size,
                " splits the language model's hidden size ", text_hidden, ", which does not divide by it");
  linear_1_ = Linear(store, ctx, name + ".linear_1", vision_hidden, text_hidden, true, init_std, LinearParallel::Column);
  linear_2_ = Linear(store, ctx, name + ".linear_2", text_hidden, text_hidden, true, init_std, LinearParallel::Row);
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
