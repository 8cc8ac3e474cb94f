#pragma once
// HuggingFace T5 checkpoints (T5ForConditionalGeneration, v1.0 and v1.1 style) <-> T5Model's parameters
// (models/t5_model.h), the layout "t5" of convert_checkpoint. The tensors map one to one (X = encoder or
// decoder; the feed-forward and its norm are layer.1 in the encoder, layer.2 in the decoder):
//   embed_tokens                               shared (also encoder./decoder.embed_tokens: the same tensor)
//   X.layers.N.input_layernorm                 X.block.N.layer.0.layer_norm
//   X.layers.N.self_attn.{q,k,v,o}_proj        X.block.N.layer.0.SelfAttention.{q,k,v,o}
//   X.layers.0.self_attn.relative_attention_bias   X.block.0.layer.0.SelfAttention.relative_attention_bias
//   decoder.layers.N.pre_cross_attn_layernorm  decoder.block.N.layer.1.layer_norm
//   decoder.layers.N.cross_attn.{q,k,v,o}_proj decoder.block.N.layer.1.EncDecAttention.{q,k,v,o}
//   X.layers.N.post_attention_layernorm        X.block.N.layer.{1,2}.layer_norm
//   X.layers.N.mlp.{wi | wi_0, wi_1}, mlp.wo   X.block.N.layer.{1,2}.DenseReluDense.{wi | wi_0, wi_1}, .wo
//   X.norm                                     X.final_layer_norm
//   lm_head                                    lm_head (untied only)
// The output: untied when the file holds an lm_head.weight that differs from the shared embedding (a
// google/t5-v1_1 checkpoint; config.json's tie_word_embeddings false), else tied; scaled by
// d_model**-0.5 as config.json's scale_decoder_outputs says, or where it is absent as
// tie_word_embeddings (default true) says, as transformers 5 reads them. The export writes
// tie_word_embeddings = scale_decoder_outputs = our scaling, and lm_head.weight when untied or unscaled
// (transformers 4 then reads the same model). Import and export are exact inverses (F32, and BF16 / F16
// widened exactly).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_convert.h"
#include "checkpoint/safetensors.h"
#include "models/t5_model.h"

namespace megadlm {

struct HfT5Info {
  TransformerConfig config;  // untie_embeddings_and_output_weights: the file has an lm_head of its own
  T5Options options;
  int32_t pad_token_id = 0, eos_token_id = 1, decoder_start_token_id = 0;
};

// Whether config.json describes a T5 model (model_type "t5" or a T5* architecture).
bool is_hf_t5_config(const nlohmann::json& cfg);
// config.json -> ours (tied or not is the weights' business: read_hf_t5_checkpoint). Unsupported settings
// (another architecture, a decoder-only config, another feed_forward_proj) are Errors naming `where`
// and the field.
HfT5Info hf_t5_config_to_info(const nlohmann::json& cfg, const std::string& where);
// Ours -> config.json; what T5 cannot be (T5Model's refusals, a padded vocabulary) is an Error.
nlohmann::json hf_t5_config_from_info(const HfT5Info& info, DType dtype);

// The HuggingFace name of our parameter (Error for one without a counterpart).
std::string hf_t5_name(const std::string& ours);

struct HfT5Checkpoint {
  HfT5Info info;
  DType dtype = DType::F32;              // the dtype most tensors were stored in
  std::vector<SafetensorsEntry> params;  // our names, F32 owned tensors, in T5Model's order
};

// Reads config.json and the weights of `dir`: every parameter the config implies must be there with its
// shape, the embedding's copies equal, every tensor in the files used, else an Error naming the tensor.
HfT5Checkpoint read_hf_t5_checkpoint(const std::string& dir);
// The info of a model of ours.
HfT5Info hf_t5_info(const T5Model& model);
// Writes config.json and the weights (atomic files) into dir, converted to opt.dtype.
void write_hf_t5_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params, const HfT5Info& info,
                            const HfWriteOptions& opt);

}  // namespace megadlm
