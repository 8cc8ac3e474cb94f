#pragma once
// --model-type llava under pipeline parallelism: the first stage's LlavaVision must see each micro-batch's
// own images at each of its forwards. The 1F1B schedule (train/pipeline_schedule.h) runs the warm-up
// forwards of later micro-batches before the backward of the first, and recomputes a micro-batch's
// forward just before its backward, so "the images of the next forward" (LlavaVision::set_images) is
// not one micro-batch's. This stage keeps the images of every micro-batch in flight, keyed by the
// schedule's MicroBatch object (which stays at one address from its preparation to its backward), hands
// them to LlavaVision before each forward_stage of that micro-batch and drops them after its backward.
// The tower's and projector's saved activations are then always those of the micro-batch whose backward
// runs (the recomputed forward is the last one before it).
//
// On a later stage (no LlavaVision: the tower and projector live on the first) it only passes through.
// Legend: n images, H = W the image size.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "models/language_model.h"
#include "models/llava_model.h"
#include "models/pipeline_stage.h"

namespace megadlm {

class LlavaPipelineStage : public PipelineStage {
 public:
  explicit LlavaPipelineStage(LanguageModel& model);
  LlavaPipelineStage(const LlavaPipelineStage&) = delete;
  LlavaPipelineStage& operator=(const LlavaPipelineStage&) = delete;

  // pixels [n, 3, H, W] (copied): the images of micro-batch `mb`, the schedule's object, in the order
  // of its placeholder runs; kept until mb's backward_stage or loss_stage. Nothing without a vision.
  void keep_images(const MicroBatch& mb, const float* pixels, int64_t n);

  Device device() const override { return model_.device(); }
  bool is_first_stage() const override { return model_.is_first_stage(); }
  bool is_last_stage() const override { return model_.is_last_stage(); }
  int64_t activation_floats(const MicroBatch& mb) const override { return model_.activation_floats(mb); }
  Tensor forward_stage(const MicroBatch& mb, const float* input) override;
  double backward_stage(const MicroBatch& mb, const Tensor& out, const float* output_grad, float grad_scale,
                        float* input_grad, float* per_token_loss = nullptr) override;
  double loss_stage(const MicroBatch& mb, const Tensor& out, float* per_token_loss = nullptr) override;
  void release_activations() override { model_.release_activations(); }
  Tensor shared_gradient() override { return model_.shared_gradient(); }

 private:
  struct Images {
    std::vector<float> pixels;  // [n, 3, H, W]
    int64_t n = 0;
  };
  LanguageModel& model_;
  LlavaVision* vision_;  // null on a stage without the tower
  std::unordered_map<const MicroBatch*, Images> in_flight_;
};

}  // namespace megadlm
