#pragma once
// HuggingFace's LlavaForConditionalGeneration (a CLIP vision tower, LlavaMultiModalProjector and a LLaMA
// or Qwen2 text model) <-> our LLaVA model with the gpt backbone (models/llava_model.h), the layout "llava" of
// convert_checkpoint. Our parameters and theirs, by part:
//   vision_tower.<CLIP name>               <vision><hf_clip.h's name of the tower's parameter>
//   multi_modal_projector.linear_{1,2}.*    <projector>linear_{1,2}.*
//   the language model's (embed_tokens, layers.N, norm, lm_head)   the llama or qwen2 layout's
//                                           (hf_tensor_map.h) with its "model." replaced by <language>
//                                           and "lm_head." by <head>
// where the parts' prefixes are transformers 5's module names (what the export writes)
//   <vision> model.vision_tower.   <projector> model.multi_modal_projector.
//   <language> model.language_model.   <head> lm_head.
// or the legacy ones (transformers 4's, which transformers 5's save_pretrained still writes)
//   vision_tower.   multi_modal_projector.   language_model.model.   language_model.lm_head.
// and the tower's names with transformers 4's "vision_model." after <vision> or without it (transformers 5).
// The import takes any of these; a round trip reproduces every tensor bit for bit under the export's
// names (F32, and BF16 / F16 widened exactly).
//
// config.json: vision_config (a CLIP vision config, model_type clip_vision_model), text_config (model_type
// llama, or qwen2: q/k/v biases; LlamaConfig's or Qwen2Config's defaults where a size is absent, as
// transformers reads it), image_token_index (or image_token_id), projector_hidden_act (gelu),
// vision_feature_layer (one index), vision_feature_select_strategy ("default": the class token dropped), multimodal_projector_bias
// (true), tie_word_embeddings. What our model cannot hold is an Error naming the key: another tower or
// text model family, another activation, a list of feature layers, the "full" strategy, a projector without
// biases. The export refuses by name what LlavaForConditionalGeneration cannot hold: the linear projector,
// a difflm (bidirectional) backbone, a language model that is neither LLaMA- nor Qwen2-shaped.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_clip.h"
#include "checkpoint/hf_config.h"
#include "checkpoint/hf_convert.h"
#include "models/llava_spec.h"

namespace megadlm {

struct HfLlavaInfo {
  HfModelInfo text;      // the language model (layout llama or qwen2)
  LlavaOptions options;  // the tower's config and options, the projector, the image token
};

// The prefixes of the parts' tensor names (see above); the default is transformers 5's.
struct HfLlavaNames {
  std::string vision = "model.vision_tower.";
  std::string projector = "model.multi_modal_projector.";
  std::string language = "model.language_model.";
  std::string head = "lm_head.";
};
HfLlavaNames hf_llava_legacy_names();  // transformers 4's (the tower without "vision_model.")

// Whether config.json describes a LLaVA model (model_type "llava", a LlavaForConditionalGeneration).
bool is_hf_llava_config(const nlohmann::json& cfg);
// config.json -> ours; what we do not map is an Error naming `where` and the key.
HfLlavaInfo hf_llava_config_to_info(const nlohmann::json& cfg, const std::string& where);

// The HuggingFace name under `names` of our tower's or projector's parameter (vision_tower.*,
// multi_modal_projector.*); an Error for another name.
std::string hf_llava_vision_name(const HfLlavaNames& names, const std::string& ours);
// The name under `names` of a language-model tensor as the llama and qwen2 layouts name it (model.*,
// lm_head.*).
std::string hf_llava_text_name(const HfLlavaNames& names, const std::string& text_name);

struct HfLlavaCheckpoint {
  HfLlavaInfo info;
  HfLlavaNames names;                    // as the file holds them
  DType dtype = DType::F32;              // the dtype most tensors were stored in
  std::vector<SafetensorsEntry> params;  // our names, F32 owned tensors: tower, projector, language model
};

// Reads config.json and the weights of `dir`: every parameter the config implies must be there with its
// shape and every tensor in the files used (a buffer, or a tied lm_head equal to the embedding, aside),
// else an Error naming the tensor.
HfLlavaCheckpoint read_hf_llava_checkpoint(const std::string& dir);
// Writes config.json and the weights (atomic files, transformers 5's names) into dir, converted to
// opt.dtype. params: a LLaVA model's (model_params of its store). A padded vocabulary is written without
// its padding rows.
void write_hf_llava_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params,
                               const HfLlavaInfo& info, const HfWriteOptions& opt);

}  // namespace megadlm
