#pragma once
// LLaVA (Liu et al., "Visual Instruction Tuning"; HuggingFace's LlavaForConditionalGeneration): CLIP's
// vision tower (models/clip_vision_spec.h) reads each image, the projector maps the selected layer's patch
// features into the language model's hidden size, and a decoder-only language model (gpt: causal, or
// difflm: bidirectional, models/gpt_spec.h, difflm_spec.h) reads them in place of the token embeddings
// at the image's positions. An image is P = (image / patch)^2 positions of the placeholder id in the
// model's sequence (the data stores one placeholder an image and expands it, data/llava_dataset.h).
// These are the options beside the language model's TransformerConfig, and the checks of what is built.
// Legend: P patches an image.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "models/clip_vision_spec.h"
#include "parallel/parallel_context.h"

namespace megadlm {

struct LlavaOptions {
  TransformerConfig vision;  // the tower's sizes (clip_vision_config)
  ClipVisionOptions clip;    // image and patch size, activation, vision_feature_layer
  ProjectorType projector = ProjectorType::Mlp2xGelu;
  int32_t image_token = -1;  // the placeholder's id
  int64_t patches() const { return (clip.image_size / clip.patch_size) * (clip.image_size / clip.patch_size); }
};

// A CLIP tower's config from its sizes: LayerNorm, biases, learned positions (P + 1 rows), bidirectional
// attention, hidden / heads channels a head.
TransformerConfig clip_vision_config(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn,
                                     const ClipVisionOptions& clip, float init_std);

// Errors naming the flag for what the LLaVA model is not built with: context parallelism, a tensor-parallel
// size that the tower's heads or MLP (or mlp2x_gelu's hidden size) do not divide by, a device other than the CPU, learned absolute positions in the language model (the image
// rows replace the whole input row, so a position table added before them would be lost: use RoPE), an
// image token outside the vocabulary, and whatever the tower's spec refuses.
void validate_llava(const TransformerConfig& language, const LlavaOptions& opt, const ParallelContext& ctx,
                    Device device);

// The options as checkpoints record them (state.json's "llava") and back; Errors name `where`.
nlohmann::json llava_to_json(const LlavaOptions& opt);
LlavaOptions llava_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace megadlm
