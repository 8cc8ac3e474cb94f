#pragma once
// pretrain_difflm --model-type llava (models/llava_model.h, docs/llava.md): the language backbone
// (--language-model-type gpt|difflm), the vision tower's sizes (Megatron's multimodal --img-h, --img-w,
// --patch-dim; --vision-num-layers, --vision-hidden-size, --vision-num-attention-heads,
// --vision-ffn-hidden-size, --vision-hidden-act), --vision-feature-layer, --projector-type and
// --freeze-vision-model / --freeze-language-model. Declared and read here so that arguments.cpp only
// calls these functions. The image token comes from the data's sidecar (the trainer fills it in).
#include <cstdint>
#include <string>

#include "core/cli_flags.h"
#include "models/llava_spec.h"
#include "models/model_spec.h"

namespace megadlm {

struct LlavaArgs {
  bool enabled = false;  // --model-type llava
  ModelType language = ModelType::GPT;  // --language-model-type
  LlavaOptions options;  // image_token still -1
  bool freeze_vision = false, freeze_language = false;
};

void declare_llava_flags(CliFlags& f);
// model_type: the --model-type value. Errors name the flag at fault (a vision flag without llava too).
LlavaArgs read_llava_flags(const CliFlags& f, const std::string& model_type, float init_std);

}  // namespace megadlm
