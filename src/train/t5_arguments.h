#pragma once
// pretrain_difflm's T5 flags, declared and read here so that arguments.cpp only calls these functions:
//   --encoder-seq-length (default --seq-length), --decoder-seq-length, --vocab-extra-ids (the
//   sentinels), --encoder-num-layers (default --num-layers), --decoder-num-layers (default the
//   encoder's), --relative-attention-num-buckets, --relative-attention-max-distance (Megatron's names),
//   and --t5-feed-forward relu | gated-gelu (HuggingFace's feed_forward_proj: v1.0 or v1.1).
// --model-type t5 also sets what T5 is built with where the flags leave it: RMSNorm with eps 1e-6, no
// biases, no position table; a flag that says otherwise is refused by validate_t5 (models/t5_spec.h).
#include <cstdint>

#include "core/cli_flags.h"
#include "models/t5_spec.h"
#include "nn/transformer_config.h"

namespace megadlm {

struct T5Args {
  int64_t encoder_seq_length = 512;  // S: encoder rows a sample
  int64_t decoder_seq_length = 128;  // T: decoder rows a sample
  int64_t vocab_extra_ids = 100;     // sentinels <extra_id_0> .. appended to the tokenizer's vocabulary
  T5Options options;
};

void declare_t5_flags(CliFlags& f);
// After the model flags are read into `model`. Not t5: the T5 flags are refused by name. t5: fills
// `out`, sets the model's T5 settings and *seq_length (the encoder's length), and validates them.
void read_t5_flags(const CliFlags& f, bool t5, TransformerConfig& model, int64_t* seq_length, T5Args& out);

}  // namespace megadlm
