#pragma once
// A model family, as data: the embeddings in front, one stack of layers or two (an encoder and a
// decoder), the heads after (nn/module_specs.h names the pieces). Each family is a spec function in a
// file of its own (gpt_spec.h, difflm_spec.h, bert_spec.h); LanguageModel builds decoder-only specs,
// BertModel (bert_model.h) BERT's.
#include <string>
#include <vector>

#include "nn/module_specs.h"

namespace megadlm {

// The families of the command line (--model-type), and the name checkpoints record.
enum class ModelType : uint8_t { GPT, DiffLM, BERT, T5 };
ModelType model_type_from_name(const std::string& name);  // "gpt" | "difflm" | "bert" | "t5"
const char* model_type_name(ModelType t);

struct ModelSpec {
  EmbeddingSpec embedding;
  std::vector<StackSpec> stacks;  // decoder-only or encoder-only: one; encoder-decoder: encoder, decoder
  std::vector<HeadSpec> heads;
};

// A decoder-only model around `layer`: the config's embeddings (a learned position table when
// --position-embedding-type learned_absolute), cfg.num_layers layers named layers.N (MoE on the layers
// cfg.moe.is_moe_layer picks), a final norm named "norm" and the LM head (tied unless
// --untie-embeddings-and-output-weights).
ModelSpec decoder_model_spec(const TransformerConfig& cfg, const LayerSpec& layer);

// The spec of a --model-type for a config (gpt_model_spec, difflm_model_spec, or bert_model_spec with
// the default BertOptions).
ModelSpec model_spec(ModelType type, const TransformerConfig& cfg);

MaskType attention_mask_type_from_name(const std::string& name);  // no_mask | causal | block_causal

}  // namespace megadlm
