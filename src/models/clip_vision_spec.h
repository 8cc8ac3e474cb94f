#pragma once
// CLIP's vision tower (Radford et al.; HuggingFace's CLIPVisionModel), the image encoder of LLaVA: the
// patch embedding (nn/patch_embedding.h: p x p patches projected without bias, a class token in front,
// learned positions), `pre_layrnorm`, L pre-norm layers of bidirectional attention and an MLP (LayerNorm,
// biases on q/k/v/o and fc1/fc2, the quick GELU x sigmoid(1.702 x) of OpenAI's CLIP or the erf GELU), no
// final norm over the sequence: `post_layernorm` normalises the class token only (the pooled output).
// LLaVA reads the hidden states of one layer (vision_feature_layer, -2: the output of layer L-1) without
// the class token, and projects them into the language model's space (the projector, its type named here:
// LLaVA's --mm-projector-type / Megatron's projector type).
// Legend: L layers, C hidden.
#include <cstdint>
#include <string>

#include "models/model_spec.h"
#include "nn/vision_projector.h"

namespace megadlm {

struct ClipVisionOptions {
  int64_t image_size = 224;  // H = W, pixels
  int64_t patch_size = 14;   // p
  HostActivation activation = HostActivation::QuickGelu;  // "quick_gelu"; GeluErf: "gelu"
  // LLaVA's vision_feature_layer: an index into the L + 1 hidden states (0: pre_layrnorm's output, l: the
  // output of layer l; negative from the end, -1 the last layer's output).
  int64_t feature_layer = -2;
};

// HuggingFace's hidden_act names of the activations built: "quick_gelu" | "gelu".
HostActivation clip_activation_from_name(const std::string& name, const std::string& where);
const char* clip_activation_name(HostActivation act);

// The number of layers whose output is the selected hidden state (0 .. L): Error naming
// vision_feature_layer when it is outside [-(L+1), L].
int64_t clip_feature_layers(int64_t num_layers, int64_t feature_layer);

LayerSpec clip_vision_layer_spec(const ClipVisionOptions& opt);
// Errors naming the setting for what the tower is not built with (MoE, RMSNorm, RoPE, grouped-query
// attention, no biases, an image not cut into whole patches, a feature layer out of range). The spec:
// the patch embedding with learned positions and its norm (pre_layrnorm), one stack of L layers named
// encoder.layers.N without a final norm, no heads (the pooled output's norm is the model's).
ModelSpec clip_vision_model_spec(const TransformerConfig& cfg, const ClipVisionOptions& opt);

// The projector's type (nn/vision_projector.h) by LLaVA-1.5's mm_projector_type names: "mlp2x_gelu"
// (linear_1, the erf GELU, linear_2) or "linear".
ProjectorType projector_type_from_name(const std::string& name);  // Error naming --projector-type
const char* projector_type_name(ProjectorType t);

}  // namespace megadlm
