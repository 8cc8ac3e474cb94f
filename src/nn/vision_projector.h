#pragma once
// LLaVA's projector from the vision tower's features to the language model's hidden size
// (HuggingFace's LlavaMultiModalProjector; LLaVA-1.5's mm_projector_type):
//   mlp2x_gelu  y = linear_2(gelu(linear_1(x)))   linear_1 C_v -> C_t, linear_2 C_t -> C_t, both with
//                                                 bias; the erf GELU (HF "gelu", nn/gelu_exact.h)
//   linear      y = linear_1(x)                   C_v -> C_t with bias
// The names of the types and their parsing are the model spec's (models/clip_vision_spec.h).
// fp32 on the CPU (the GELU is a host loop). Under tensor parallelism (Megatron's MultimodalProjector)
// mlp2x_gelu's linear_1 is column-parallel (this rank's C_t/tp GELU columns) and linear_2 row-parallel (its
// output all-reduced); linear is replicated on every tp rank. x and y are whole on every rank.
// Legend: N feature rows (B images x P patches), C_v the tower's hidden size, C_t the language model's.
#include <string>

#include "core/arena.h"
#include "nn/linear.h"

namespace megadlm {

enum class ProjectorType : uint8_t { Mlp2xGelu, Linear };

class VisionProjector {
 public:
  VisionProjector() = default;
  // Registers `name`.linear_1 (and `name`.linear_2 for mlp2x_gelu), weights [out, in] and biases. ctx
  // (kept by pointer: it outlives the projector) has no sequence parallelism: the tower's.
  VisionProjector(ParamStore& store, const ParallelContext& ctx, const std::string& name, ProjectorType type,
                  int64_t vision_hidden, int64_t text_hidden, float init_std);

  // x [N, C_v] -> y [N, C_t] from the arena; saves what the backward needs.
  Tensor forward(Arena& arena, const Tensor& x);
  // dy [N, C_t] -> dx [N, C_v] written (the gradient that flows into the tower); parameter gradients
  // accumulated. Temporaries from the arena, released before returning.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx);

  ProjectorType type() const { return type_; }

 private:
  ProjectorType type_ = ProjectorType::Mlp2xGelu;
  Linear linear_1_, linear_2_;
  Tensor h_;  // linear_1's output [N, C_t/tp] (mlp2x_gelu)
};

}  // namespace megadlm
