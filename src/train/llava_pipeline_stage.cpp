#include "train/llava_pipeline_stage.h"

#include "core/error.h"

namespace megadlm {

LlavaPipelineStage::LlavaPipelineStage(LanguageModel& model)
    : model_(model), vision_(dynamic_cast<LlavaVision*>(model.inserts())) {}

void LlavaPipelineStage::keep_images(const MicroBatch& mb, const float* pixels, int64_t n) {
  if (vision_ == nullptr) return;
  const int64_t S = vision_->options().clip.image_size;
  Images& kept = in_flight_[&mb];
  kept.pixels.assign(pixels, pixels + n * 3 * S * S);
  kept.n = n;
}

Tensor LlavaPipelineStage::forward_stage(const MicroBatch& mb, const float* input) {
  if (vision_ != nullptr) {
    const auto it = in_flight_.find(&mb);
    MEGADLM_CHECK(it != in_flight_.end(), "LLaVA pipeline stage: a forward of a micro-batch whose images were not kept");
    vision_->set_images(it->second.pixels.data(), it->second.n);
  }
  return model_.forward_stage(mb, input);
}

double LlavaPipelineStage::backward_stage(const MicroBatch& mb, const Tensor& out, const float* output_grad,
                                          float grad_scale, float* input_grad, float* per_token_loss) {
  const double loss = model_.backward_stage(mb, out, output_grad, grad_scale, input_grad, per_token_loss);
  in_flight_.erase(&mb);
  return loss;
}

double LlavaPipelineStage::loss_stage(const MicroBatch& mb, const Tensor& out, float* per_token_loss) {
  const double loss = model_.loss_stage(mb, out, per_token_loss);
  in_flight_.erase(&mb);
  return loss;
}

}  // namespace megadlm
