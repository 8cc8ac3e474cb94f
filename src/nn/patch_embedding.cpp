#include "nn/patch_embedding.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

namespace {

void check_host_f32(const Tensor& t, const char* what) {
  MEGADLM_CHECK(t.device() == Device::CPU && t.dtype() == DType::F32, "PatchEmbedding: ", what,
                " must be fp32 on the CPU (the vision tower runs there)");
}

}  // namespace

PatchEmbedding::PatchEmbedding(ParamStore& store, const std::string& name, int64_t image_size, int64_t patch_size,
                               int64_t C, float init_std)
    : store_(&store), image_(image_size), patch_(patch_size), C_(C) {
  MEGADLM_CHECK(patch_size >= 1 && image_size >= patch_size && image_size % patch_size == 0, name,
                ": image_size ", image_size, " is not a positive multiple of patch_size ", patch_size);
  grid_ = image_size / patch_size;
  class_ = store.add(name + ".class_embedding", {C}, Init::Normal, init_std, /*weight_decay=*/false);
  weight_ = store.add(name + ".patch_embedding.weight", {C, 3, patch_size, patch_size}, Init::Normal, init_std);
  position_ = store.add(name + ".position_embedding.weight", {rows_per_image(), C}, Init::Normal, init_std);
}

void PatchEmbedding::unfold(const float* pixels, int64_t B, float* cols) const {
  const int64_t P = patches(), K = 3 * patch_ * patch_, HW = image_ * image_;
#pragma omp parallel for schedule(static) if (B * P * K >= (1 << 16))
  for (int64_t bp = 0; bp < B * P; ++bp) {
    const int64_t b = bp / P, gy = bp % P / grid_, gx = bp % grid_;
    float* row = cols + bp * K;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t ky = 0; ky < patch_; ++ky) {
        const float* src = pixels + (b * 3 + c) * HW + (gy * patch_ + ky) * image_ + gx * patch_;
        for (int64_t kx = 0; kx < patch_; ++kx) *row++ = src[kx];
      }
  }
}

Tensor PatchEmbedding::forward(Arena& arena, const Tensor& pixels) {
  check_host_f32(pixels, "the pixel values");
  MEGADLM_CHECK(pixels.dim() == 4 && pixels.size(1) == 3 && pixels.size(2) == image_ && pixels.size(3) == image_,
                "PatchEmbedding: pixel values of shape ", pixels.shape().str(), ", expected [B, 3, ", image_, ", ",
                image_, "]");
  B_ = pixels.size(0);
  arena_ = &arena;
  const int64_t P = patches(), S = rows_per_image(), K = 3 * patch_ * patch_;
  cols_ = arena.tensor({B_ * P, K});
  unfold(pixels.data<float>(), B_, cols_.data<float>());
  // The patches' projections [B*P, C] = cols [B*P, K] @ W [C, K]^T, then moved into rows 1.. of each image.
  Tensor proj = arena.tensor({B_ * P, C_});
  backend_of(pixels).gemm(false, true, B_ * P, C_, K, 1.0f, cols_.data<float>(), K, store_->value(weight_).data<float>(),
                          K, 0.0f, proj.data<float>(), C_);
  Tensor x = arena.tensor({B_ * S, C_});
  const float* cls = store_->value(class_).data<float>();
  const float* pos = store_->value(position_).data<float>();
  const float* pr = proj.data<float>();
  float* out = x.data<float>();
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* src = s == 0 ? cls : pr + (b * P + s - 1) * C_;
      float* dst = out + (b * S + s) * C_;
      for (int64_t c = 0; c < C_; ++c) dst[c] = src[c] + pos[s * C_ + c];
    }
  return x;
}

void PatchEmbedding::backward(const Tensor& dx) {
  check_host_f32(dx, "the output gradient");
  MEGADLM_CHECK(arena_ != nullptr, "PatchEmbedding::backward before a forward");
  const int64_t P = patches(), S = rows_per_image(), K = 3 * patch_ * patch_;
  MEGADLM_CHECK(dx.numel() == B_ * S * C_, "PatchEmbedding::backward: ", dx.numel(), " gradient values for ", B_,
                " images of ", S, " rows of ", C_);
  const float* g = dx.data<float>();
  float* dcls = store_->grad(class_).data<float>();
  float* dpos = store_->grad(position_).data<float>();
  // Sums over the images in a fixed order (bitwise reproducible at any thread count).
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < C_; ++c) {
      float sum = 0.0f;
      for (int64_t b = 0; b < B_; ++b) sum += g[(b * S + s) * C_ + c];
      dpos[s * C_ + c] += sum;
      if (s == 0) dcls[c] += sum;
    }
  // dW [C, K] (+)= dproj [B*P, C]^T @ cols [B*P, K], dproj being each image's rows 1.. of dx gathered.
  const size_t mark = arena_->mark();
  Tensor dproj = arena_->tensor({B_ * P, C_});
  for (int64_t b = 0; b < B_; ++b)
    std::copy(g + (b * S + 1) * C_, g + (b * S + S) * C_, dproj.data<float>() + b * P * C_);
  backend_of(dx).gemm(true, false, C_, K, B_ * P, 1.0f, dproj.data<float>(), C_, cols_.data<float>(), K,
                      store_->grad_beta(weight_), store_->grad(weight_).data<float>(), K);
  arena_->release(mark);
}

}  // namespace megadlm
