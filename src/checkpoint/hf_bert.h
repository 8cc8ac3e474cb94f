#pragma once
// HuggingFace BERT checkpoints (BertForPreTraining, BertForMaskedLM) <-> BertModel's parameters
// (models/bert_model.h), the layout "bert" of convert_checkpoint. The tensors map one to one:
//   embed_tokens / embed_positions / embed_token_types   bert.embeddings.{word,position,token_type}_embeddings
//   embed_norm                                           bert.embeddings.LayerNorm
//   layers.N.self_attn.{q,k,v}_proj                      bert.encoder.layer.N.attention.self.{query,key,value}
//   layers.N.self_attn.o_proj                            bert.encoder.layer.N.attention.output.dense
//   layers.N.input_layernorm                             bert.encoder.layer.N.attention.output.LayerNorm
//   layers.N.mlp.fc1 / fc2                               bert.encoder.layer.N.intermediate.dense / output.dense
//   layers.N.post_attention_layernorm                    bert.encoder.layer.N.output.LayerNorm
//   pooler.dense                                         bert.pooler.dense             (BertForPreTraining)
//   mlm_head.dense / norm                                cls.predictions.transform.dense / .LayerNorm
//   mlm_head.bias                                        cls.predictions.bias
//   binary_head                                          cls.seq_relationship          (BertForPreTraining)
// The MLM decoder (cls.predictions.decoder) is the word embeddings: not written, and checked equal where a
// file has it. HuggingFace's BERT is post-norm with its biases and qkv of hidden / heads a head; "gelu"
// is our exact GELU, "gelu_new" / "gelu_pytorch_tanh" the tanh one. Import and export are exact
// inverses (F32, and BF16 / F16 widened exactly).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/hf_convert.h"
#include "checkpoint/safetensors.h"
#include "models/bert_model.h"

namespace megadlm {

struct HfBertInfo {
  TransformerConfig config;
  BertOptions options;  // binary_head: BertForPreTraining (true) or BertForMaskedLM (false)
  int32_t pad_token_id = 0;
};

// Whether config.json describes a BERT model (model_type "bert" or a Bert* architecture).
bool is_hf_bert_config(const nlohmann::json& cfg);
// config.json -> ours; unsupported settings (another architecture, relative positions, a decoder, an
// activation other than GELU, untied embeddings) are Errors naming `where` and the field.
HfBertInfo hf_bert_config_to_info(const nlohmann::json& cfg, const std::string& where);
// Ours -> config.json; what HuggingFace's BERT cannot express (pre-norm, no biases, another head size)
// is an Error.
nlohmann::json hf_bert_config_from_info(const HfBertInfo& info, DType dtype);

// The HuggingFace name of our parameter (Error for one without a counterpart).
std::string hf_bert_name(const std::string& ours);

struct HfBertCheckpoint {
  HfBertInfo info;
  DType dtype = DType::F32;              // the dtype most tensors were stored in
  std::vector<SafetensorsEntry> params;  // our names, F32 owned tensors, in BertModel's order
};

// Reads config.json and the weights of `dir`: every parameter the config implies must be there with its
// shape, every tensor in the files must be used (or be a buffer, or the tied decoder), else an Error
// naming the tensor.
HfBertCheckpoint read_hf_bert_checkpoint(const std::string& dir);
// Loading and listing the parameters: load_params_into and model_params of hf_convert.h on
// model.params().
// The info of a model of ours (its config and options).
HfBertInfo hf_bert_info(const BertModel& model);
// Writes config.json and the weights (atomic files) into dir, converted to opt.dtype.
void write_hf_bert_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& params,
                              const HfBertInfo& info, const HfWriteOptions& opt);

}  // namespace megadlm
