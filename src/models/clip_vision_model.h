#pragma once
// CLIP's vision tower, built from a clip_vision_model_spec (models/clip_vision_spec.h): PatchEmbedding,
// pre_layrnorm, the encoder's layers as two TransformerBlocks (the layers up to the selected feature
// layer, then the rest), post_layernorm over the class token. fp32, on the CPU. Under tensor parallelism
// the layers split their heads and MLP columns over the tp ranks as the language model's do (the patch
// embedding, positions and norms replicated); every tp rank gets the same images and gives the same
// features. The tower's rows are never split by --sequence-parallel; it runs whole on one pipeline stage.
//
// The outputs, as HuggingFace's CLIPVisionModel and LLaVA name them:
//   features      [B*P, C]  hidden_states[vision_feature_layer] without the class token (LLaVA's
//                           "default" select strategy): what the projector reads
//   last_hidden   [B*S, C]  last_hidden_state (the last layer's output, no norm)
//   pooled        [B, C]    pooler_output = post_layernorm(last_hidden[:, 0])
// LLaVA needs only the features: forward(pixels, false) runs the layers up to the feature layer and
// leaves the other two undefined. The backward runs from a gradient of the features (the layers after
// the feature layer and post_layernorm get none: the features do not depend on them).
//
// Freezing (LLaVA's first stage trains the projector alone): a frozen tower's backward does nothing, so
// its parameters get no gradient; the optimizer skips them (AdamW::freeze, optim/adamw.h).
// Legend: B images, P patches an image, S = P + 1 rows an image (the class token first), C hidden.
#include <cstdint>
#include <string>

#include "core/arena.h"
#include "core/parameters.h"
#include "models/clip_vision_spec.h"
#include "nn/norm.h"
#include "nn/patch_embedding.h"
#include "nn/transformer_block.h"

namespace megadlm {

class ClipVisionModel {
 public:
  // With `store`, the tower registers its parameters there under `prefix` (LLaVA's vision_tower.) and
  // leaves the store to be finalized by its owner; else into a store of its own, finalized here.
  ClipVisionModel(const TransformerConfig& cfg, const ClipVisionOptions& opt, const ParallelContext& ctx,
                  ParamStore* store = nullptr, const std::string& prefix = "");
  // The modules keep pointers to this model's context: not copied or moved.
  ClipVisionModel(const ClipVisionModel&) = delete;
  ClipVisionModel& operator=(const ClipVisionModel&) = delete;

  const TransformerConfig& config() const { return cfg_; }
  const ClipVisionOptions& options() const { return opt_; }
  ParamStore& params() { return params_; }
  const ParamStore& params() const { return params_; }
  int64_t patches() const { return embedding_.patches(); }  // P

  struct Outputs {
    Tensor features;     // [B*P, C]
    Tensor last_hidden;  // [B*S, C], with `all`
    Tensor pooled;       // [B, C], with `all`
  };
  // pixels [B, 3, H, W] (fp32, as data/image_data.h's ImageDataset gives them). all: also the last
  // hidden state and the pooled output. The outputs live in the model's arena until the next forward.
  Outputs forward(const Tensor& pixels, bool all = true);
  // dfeatures [B*P, C], the gradient of the last forward's features -> every parameter's gradient that
  // they depend on (accumulated). Nothing when frozen.
  void backward(const Tensor& dfeatures);

  void set_frozen(bool frozen) { frozen_ = frozen; }
  bool frozen() const { return frozen_; }

 private:
  TransformerConfig cfg_;
  ClipVisionOptions opt_;
  ParallelContext ctx_;
  ParamStore own_params_;
  ParamStore& params_;  // own_params_ or the store given
  Arena arena_;
  PatchEmbedding embedding_;
  Norm pre_norm_, post_norm_;
  TransformerBlock to_features_, after_features_;  // layers [0, f) and [f, L)
  BatchInfo batch_;
  bool frozen_ = false;
};

}  // namespace megadlm
