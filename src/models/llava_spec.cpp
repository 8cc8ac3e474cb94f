#include "models/llava_spec.h"

#include "core/error.h"
#include "models/config_json.h"

namespace megadlm {

TransformerConfig clip_vision_config(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn,
                                     const ClipVisionOptions& clip, float init_std) {
  MEGADLM_CHECK(heads >= 1 && hidden % heads == 0, "--vision-hidden-size ", hidden,
                " is not a multiple of --vision-num-attention-heads ", heads);
  MEGADLM_CHECK(clip.patch_size >= 1 && clip.image_size % clip.patch_size == 0, "--img-h ", clip.image_size,
                " is not a multiple of --patch-dim ", clip.patch_size);
  TransformerConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = c.num_query_groups = heads;
  c.kv_channels = hidden / heads;
  c.ffn_hidden_size = ffn;
  c.normalization = NormKind::LayerNorm;
  c.norm_epsilon = 1e-5f;
  c.activation = Activation::Gelu;
  c.add_bias_linear = true;
  c.position_embedding = PositionEmbedding::LearnedAbsolute;
  c.attention_mask = MaskType::None;
  c.max_position_embeddings = (clip.image_size / clip.patch_size) * (clip.image_size / clip.patch_size) + 1;
  c.init_method_std = init_std;
  return c;
}

void validate_llava(const TransformerConfig& language, const LlavaOptions& opt, const ParallelContext& ctx,
                    Device device) {
  MEGADLM_CHECK(device == Device::CPU, "--model-type llava runs on the CPU (--device cpu): the vision tower's ",
                "host activations and patch embedding are CPU loops");
  MEGADLM_CHECK(opt.vision.num_attention_heads % ctx.tp.size == 0 && opt.vision.ffn_hidden_size % ctx.tp.size == 0,
                "--model-type llava under --tensor-model-parallel-size ", ctx.tp.size,
                ": the vision tower splits its heads and MLP over the tp ranks, so --vision-num-attention-heads (",
                opt.vision.num_attention_heads, ") and --vision-ffn-hidden-size (", opt.vision.ffn_hidden_size,
                ") must divide by it");
  MEGADLM_CHECK(opt.projector != ProjectorType::Mlp2xGelu || language.hidden_size % ctx.tp.size == 0,
                "--model-type llava: --projector-type mlp2x_gelu under --tensor-model-parallel-size ", ctx.tp.size,
                " splits --hidden-size ", language.hidden_size, ", which does not divide by it");
  MEGADLM_CHECK(ctx.cp.size == 1, "--model-type llava is not built for context parallelism: ",
                "--context-parallel-size must be 1");
  MEGADLM_CHECK(language.position_embedding != PositionEmbedding::LearnedAbsolute,
                "--model-type llava: --position-embedding-type learned_absolute is not built (an image row takes the "
                "projected feature in place of the whole input row, so the position table would be lost there); use "
                "rope");
  MEGADLM_CHECK(!language.block_diffusion, "--model-type llava: --block-diffusion is not built with images");
  MEGADLM_CHECK(opt.image_token >= 0 && opt.image_token < language.vocab_size, "--model-type llava: the image token ",
                opt.image_token, " is outside the vocabulary of ", language.vocab_size,
                " (the data's sidecar names it: preprocess_data --image-key)");
  clip_vision_model_spec(opt.vision, opt.clip);
}

nlohmann::json llava_to_json(const LlavaOptions& opt) {
  return {{"vision", config_to_json(opt.vision)},
          {"image_size", opt.clip.image_size},
          {"patch_size", opt.clip.patch_size},
          {"hidden_act", clip_activation_name(opt.clip.activation)},
          {"vision_feature_layer", opt.clip.feature_layer},
          {"projector_type", projector_type_name(opt.projector)},
          {"image_token", opt.image_token}};
}

LlavaOptions llava_from_json(const nlohmann::json& j, const std::string& where) {
  LlavaOptions o;
  try {
    o.vision = config_from_json(j.at("vision"), where);
    o.clip.image_size = j.at("image_size").get<int64_t>();
    o.clip.patch_size = j.at("patch_size").get<int64_t>();
    o.clip.activation = clip_activation_from_name(j.at("hidden_act").get<std::string>(), where);
    o.clip.feature_layer = j.at("vision_feature_layer").get<int64_t>();
    o.projector = projector_type_from_name(j.at("projector_type").get<std::string>());
    o.image_token = j.at("image_token").get<int32_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": the LLaVA options (\"llava\") are malformed: ", e.what());
  }
  return o;
}

}  // namespace megadlm
