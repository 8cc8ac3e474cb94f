#pragma once
// HuggingFace CLIP vision towers (CLIPVisionModel; the vision half of a CLIPModel, as LLaVA's
// openai/clip-vit-large-patch14-336 is stored) <-> ClipVisionModel's parameters (models/clip_vision_model.h),
// the layout "clip_vision" of convert_checkpoint. The tensors map one to one, under the file's prefix
// (transformers 5 writes CLIPVisionModel's without one, transformers 4 and CLIPModel with
// "vision_model."):
//   embeddings.{class_embedding, patch_embedding.weight, position_embedding.weight}   the same
//   pre_layrnorm, post_layernorm                                                      the same
//   encoder.layers.N.input_layernorm            encoder.layers.N.layer_norm1
//   encoder.layers.N.self_attn.{q,k,v}_proj     encoder.layers.N.self_attn.{q,k,v}_proj
//   encoder.layers.N.self_attn.o_proj           encoder.layers.N.self_attn.out_proj
//   encoder.layers.N.post_attention_layernorm   encoder.layers.N.layer_norm2
//   encoder.layers.N.mlp.fc1 / fc2              encoder.layers.N.mlp.fc1 / fc2
// A CLIPModel's text tower and projections are left unused. config.json: hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, image_size, patch_size, num_channels (3 only), hidden_act
// (quick_gelu, gelu), layer_norm_eps (a CLIPModel's under vision_config). Import and export are exact
// inverses (F32, and BF16 / F16 widened exactly); the export keeps the prefix the import found.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_convert.h"
#include "checkpoint/safetensors.h"
#include "models/clip_vision_model.h"

namespace megadlm {

struct HfClipVisionInfo {
  TransformerConfig config;
  ClipVisionOptions options;
  std::string prefix = "vision_model.";  // of the HF tensor names
};

// Whether config.json describes a CLIP vision tower (model_type "clip_vision_model", a CLIPVisionModel
// architecture) or a CLIPModel (model_type "clip") whose vision tower is read.
bool is_hf_clip_vision_config(const nlohmann::json& cfg);
// config.json -> ours; unsupported settings are Errors naming `where` and the field.
HfClipVisionInfo hf_clip_vision_config_to_info(const nlohmann::json& cfg, const std::string& where);
// Ours -> a CLIPVisionModel's config.json.
nlohmann::json hf_clip_vision_config_from_info(const HfClipVisionInfo& info, DType dtype);

// The HuggingFace name of our parameter, without the prefix (Error for one without a counterpart).
std::string hf_clip_vision_name(const std::string& ours);

struct HfClipVisionCheckpoint {
  HfClipVisionInfo info;
  DType dtype = DType::F32;              // the dtype most tensors were stored in
  std::vector<SafetensorsEntry> params;  // our names, F32 owned tensors, in ClipVisionModel's order
};

// Reads config.json and the weights of `dir`: every parameter the config implies must be there with its
// shape, every tensor in the files used (or a buffer, or a CLIPModel's text half), else an Error naming
// the tensor.
HfClipVisionCheckpoint read_hf_clip_vision_checkpoint(const std::string& dir);
// Writes config.json and the weights (atomic files) into dir, converted to opt.dtype, named under
// info.prefix.
void write_hf_clip_vision_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params,
                                     const HfClipVisionInfo& info, const HfWriteOptions& opt);

}  // namespace megadlm
