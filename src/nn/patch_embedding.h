#pragma once
// The patch embedding of a vision transformer (CLIP's CLIPVisionEmbeddings): each image is cut into
// p x p patches, each patch's 3 p p values are projected to C features (a convolution of stride p
// without bias: one product of the unfolded patches with the weight), the class embedding is put in
// front of an image's patches, and the learned position table is added:
//   x[b, 0]     = class + pos[0]
//   x[b, 1 + i] = W . patch_i(pixels[b]) + pos[1 + i]      (patches in row-major order of the grid)
// The unfolded row of a patch is in (channel, ky, kx) order, the order of the weight [C, 3, p, p]
// flattened, so the weight is HuggingFace's convolution weight as it is stored. The backward gives the
// parameters' gradients only: the pixels are data, no gradient flows into them.
// fp32 on the CPU (the unfolding and the sums are host loops; the product goes through the Backend).
// Legend: B images, 3 channels, H = W image side, p patch side, G = H / p patches a side, P = G G
// patches an image, S = P + 1 rows an image (the class token first), C hidden, K = 3 p p.
#include <string>

#include "core/arena.h"
#include "core/parameters.h"

namespace megadlm {

class PatchEmbedding {
 public:
  PatchEmbedding() = default;
  // Registers `name`.class_embedding [C], `name`.patch_embedding.weight [C, 3, p, p] and
  // `name`.position_embedding.weight [S, C]. image_size must be a multiple of patch_size.
  PatchEmbedding(ParamStore& store, const std::string& name, int64_t image_size, int64_t patch_size, int64_t C,
                 float init_std);

  // pixels [B, 3, H, W] -> x [B*S, C] from the arena; saves the unfolded patches for the backward.
  Tensor forward(Arena& arena, const Tensor& pixels);
  // dx [B*S, C] -> the gradients of the class embedding, the patch weight and the position table
  // (accumulated; the weight's first write of a step overwrites, ParamStore::claim_unwritten_grad). Its
  // temporaries come from the forward's arena, still holding the forward's activations.
  void backward(const Tensor& dx);

  int64_t image_size() const { return image_; }
  int64_t patch_size() const { return patch_; }
  int64_t patches() const { return grid_ * grid_; }         // P
  int64_t rows_per_image() const { return patches() + 1; }  // S

 private:
  // pixels [B, 3, H, W] -> cols [B*P, K].
  void unfold(const float* pixels, int64_t B, float* cols) const;

  ParamStore* store_ = nullptr;
  int64_t image_ = 0, patch_ = 0, grid_ = 0, C_ = 0;
  int class_ = -1, weight_ = -1, position_ = -1;
  Arena* arena_ = nullptr;  // the forward's
  Tensor cols_;             // the forward's unfolded patches [B*P, K]
  int64_t B_ = 0;
};

}  // namespace megadlm
