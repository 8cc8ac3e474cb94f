#pragma once
// T5's generation (HuggingFace's generate of a T5ForConditionalGeneration without beams): the prompts are
// the encoder's input, padded on the right to the longest (mask 0) and run through the encoder once;
// the decoder starts every sequence from decoder_start and adds one token a step, chosen from the new
// row's logits by ar_next_token (infer/sampling.h: greedy at temperature 0, else temperature, top-k,
// top-p with Philox(seed + b) or seeds[b], as GPT's sampler), until the eos id (not returned) or
// max_new_tokens. A finished sequence is fed the pad id while the others go on, as HuggingFace does.
// kv_cache: each step runs one decoder row a sequence against T5DecoderCache (the cross-attention's keys
// and values made once); off, each step runs the whole model on the prefix so far (the reference).
// Legend: B prompts, V vocabulary.
#include <cstdint>
#include <vector>

#include "infer/sampling.h"
#include "models/t5_model.h"

namespace megadlm {

struct T5GenerateOptions {
  // max_new_tokens (>= 1), temperature, top_k, top_p, eod (T5's eos id), vocab_limit, seed / seeds,
  // kv_cache.
  ARSampleOptions sampling;
  int32_t decoder_start = 0;  // the decoder's first input
  int32_t pad = 0;            // the encoder's padding, and the input of a finished sequence
};

// prompts: B non-empty encoder inputs -> the B generated id lists (no decoder start, no eos).
std::vector<std::vector<int32_t>> t5_generate_batch(T5Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                                    const T5GenerateOptions& opt);

}  // namespace megadlm
