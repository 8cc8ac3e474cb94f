#pragma once
// BERT (Devlin et al.; HuggingFace's BertForPreTraining / BertForMaskedLM): a bidirectional encoder with
// learned positions, a token-type table, LayerNorm and biases everywhere, GELU, and the MLM head with
// optionally the pooler and the binary (next-sentence) head. Post-norm as the original (the embedding
// sum normalised, each branch y = norm(x + f(x)), no final norm) or pre-norm (Megatron's BERT: no
// embedding norm, y = x + f(norm(x)), a final norm). The padding mask is applied by BertModel
// (models/bert_model.h). Dense only.
#include "models/model_spec.h"

namespace megadlm {

struct BertOptions {
  bool pre_norm = false;
  bool binary_head = true;  // the pooler and the binary head (--bert-no-binary-head: neither)
  int64_t token_types = 2;
  bool exact_gelu = true;   // GELU with the erf (HF "gelu"); false: the tanh approximation ("gelu_new")
};

LayerSpec bert_layer_spec(const TransformerConfig& cfg, const BertOptions& opt);
// Errors naming the flag for what BERT is not built with (MoE, RoPE, RMSNorm, untied output).
ModelSpec bert_model_spec(const TransformerConfig& cfg, const BertOptions& opt = BertOptions{});

}  // namespace megadlm
