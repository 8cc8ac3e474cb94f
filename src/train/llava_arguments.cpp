#include "train/llava_arguments.h"

#include "core/error.h"
#include "train/model_type_flags.h"

namespace megadlm {

namespace {

const char* const kLlavaFlags[] = {"language-model-type", "img-h", "img-w", "patch-dim", "vision-num-layers",
                                   "vision-hidden-size", "vision-num-attention-heads", "vision-ffn-hidden-size",
                                   "vision-hidden-act", "vision-feature-layer", "projector-type",
                                   "freeze-vision-model", "freeze-language-model"};

}  // namespace

void declare_llava_flags(CliFlags& f) {
  f.add_string("language-model-type", "gpt", "--model-type llava: the language backbone, gpt (causal) or difflm "
               "(masked diffusion, bidirectional)");
  f.add_int("img-h", 224, "--model-type llava: image height in pixels (square images: --img-w the same)", at_least(1));
  f.add_int("img-w", 224, "--model-type llava: image width in pixels", at_least(1));
  f.add_int("patch-dim", 14, "--model-type llava: the vision tower's patch size", at_least(1));
  f.add_int("vision-num-layers", 24, "--model-type llava: the vision tower's layers", at_least(1));
  f.add_int("vision-hidden-size", 1024, "--model-type llava: the vision tower's hidden size", at_least(1));
  f.add_int("vision-num-attention-heads", 16, "--model-type llava: the vision tower's attention heads", at_least(1));
  f.add_int("vision-ffn-hidden-size", 4096, "--model-type llava: the vision tower's MLP size", at_least(1));
  f.add_string("vision-hidden-act", "quick_gelu", "--model-type llava: the vision tower's activation, quick_gelu or gelu");
  f.add_int("vision-feature-layer", -2, "--model-type llava: the hidden state the projector reads (-2: the output of "
            "the second-to-last layer; 0: the embeddings)");
  f.add_string("projector-type", "mlp2x_gelu", "--model-type llava: the projector, mlp2x_gelu or linear");
  f.add_bool("freeze-vision-model", "--model-type llava: the vision tower is not trained");
  f.add_bool("freeze-language-model", "--model-type llava: the language model is not trained");
}

LlavaArgs read_llava_flags(const CliFlags& f, const std::string& model_type, float init_std) {
  LlavaArgs a;
  a.enabled = model_type == "llava";
  refuse_flags_for_other_models(f, a.enabled, kLlavaFlags, "--model-type llava");
  if (!a.enabled) return a;
  const std::string lang = f.get_string("language-model-type");
  MEGADLM_CHECK(lang == "gpt" || lang == "difflm", "--language-model-type: unknown value '", lang,
                "' (gpt or difflm)");
  a.language = model_type_from_name(lang);
  MEGADLM_CHECK(f.get_int("img-h") == f.get_int("img-w"), "--img-h ", f.get_int("img-h"), " and --img-w ",
                f.get_int("img-w"), " differ: the vision tower takes square images");
  LlavaOptions& o = a.options;
  o.clip.image_size = f.get_int("img-h");
  o.clip.patch_size = f.get_int("patch-dim");
  o.clip.activation = clip_activation_from_name(f.get_string("vision-hidden-act"), "--vision-hidden-act");
  o.clip.feature_layer = f.get_int("vision-feature-layer");
  o.vision = clip_vision_config(f.get_int("vision-num-layers"), f.get_int("vision-hidden-size"),
                                f.get_int("vision-num-attention-heads"), f.get_int("vision-ffn-hidden-size"), o.clip,
                                init_std);
  clip_feature_layers(o.vision.num_layers, o.clip.feature_layer);
  o.projector = projector_type_from_name(f.get_string("projector-type"));
  a.freeze_vision = f.get_bool("freeze-vision-model");
  a.freeze_language = f.get_bool("freeze-language-model");
  return a;
}

}  // namespace megadlm
