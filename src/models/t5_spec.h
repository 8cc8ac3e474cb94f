#pragma once
// T5 (Raffel et al.; HuggingFace's T5ForConditionalGeneration): an encoder-decoder with one token
// embedding shared by both stacks, pre-norm layers with T5's scale-only RMSNorm ("T5LayerNorm": no mean
// subtracted, no bias), no biases anywhere, no position embedding but a learned relative position bias
// added to the attention scores (bucketed relative distances, one table [buckets, H] per stack held by
// its first layer, nn/t5_relative_bias.h), attention without the 1/sqrt(D) scaling, and the
// feed-forward of v1.0 (ReLU: wi, wo) or v1.1 (gated GELU: gelu_tanh(wi_0 x) * wi_1 x, then wo). The
// output matrix is the embedding (tied, v1.0) or an lm_head of its own (--untie-embeddings-and-output-
// weights, v1.1); the decoder's output is scaled by d_model^-0.5 before it where scale_output says
// (HF's scale_decoder_outputs: v1.0 scales, v1.1 does not). The heads' inner size H*D may differ from d_model (HF's d_kv).
// The stacks' sizes: TransformerConfig (hidden d_model, heads H, kv_channels d_kv, ffn d_ff,
// num_layers the encoder's layers); the rest here. Built by T5Model (models/t5_model.h). Dense only.
#include <cstdint>

#include "models/model_spec.h"
#include "nn/t5_feed_forward.h"

namespace megadlm {

const char* t5_feed_forward_name(T5FeedForward f);                                   // "relu" | "gated-gelu"
// Error naming `where` for anything but "relu" and "gated-gelu" (HF's feed_forward_proj).
T5FeedForward t5_feed_forward_from_name(const std::string& name, const std::string& where);

struct T5Options {
  int64_t num_decoder_layers = 2;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  T5FeedForward feed_forward = T5FeedForward::Relu;
  bool scale_output = true;  // the decoder's output times d_model^-0.5 before the output matrix
};

// The options a --model-type t5 config takes when nothing else says: as many decoder layers as encoder
// layers, HF's default buckets, ReLU, the output scaled when it is tied (v1.0) and not when untied (v1.1).
T5Options default_t5_options(const TransformerConfig& cfg);

// Errors naming the flag or the option for what T5 is not built with (MoE, biases, LayerNorm,
// position embeddings, grouped-query attention, QK norm, bad bucket counts).
void validate_t5(const TransformerConfig& cfg, const T5Options& opt);

// The two stacks ("encoder.layers" bidirectional, "decoder.layers" causal with cross-attention; their
// final norms "encoder.norm", "decoder.norm"), pre-norm RMSNorm, no position table, the LM head tied
// or not. T5Model reads the stacks' sizes and the head's tying from it.
ModelSpec t5_model_spec(const TransformerConfig& cfg, const T5Options& opt);

}  // namespace megadlm
