#pragma once
// Samplers over a LanguageModel, one prompt at a time.
//
// Diffusion (LLaDA's reverse process): the canvas is the prompt followed by gen_length mask tokens.
// The generation is cut into blocks of block_length, decoded left to right (semi-autoregressive when
// block_length < gen_length); each block gets steps / num_blocks steps. At every step the model
// predicts all positions; in the current block, the masked positions get a proposal x0 (argmax, with
// Gumbel noise at temperature > 0), and the k most confident proposals are committed, with k spread
// evenly over the block's steps (the first steps take the remainder). Confidence is the softmax
// probability of the proposal (low_confidence remasking) or a uniform draw (random remasking).
//
// Autoregressive: greedy or temperature / top-k / top-p sampling, re-running the whole prefix each
// token (no KV cache yet), stopping at end-of-document.
//
// Randomness comes from Philox(seed, Sampling), so a seed gives the same text on any thread count.
#include <cstdint>
#include <string>
#include <vector>

#include "models/language_model.h"

namespace megadlm {

enum class Remasking : uint8_t { LowConfidence, Random };
Remasking remasking_from_name(const std::string& name);  // low_confidence | random

struct DiffusionSampleOptions {
  int64_t gen_length = 64;
  int64_t steps = 64;
  int64_t block_length = 64;
  float temperature = 0.0f;
  Remasking remasking = Remasking::LowConfidence;
  int32_t mask_token = -1;
  int64_t vocab_limit = 0;  // proposals restricted to ids [0, vocab_limit) minus the mask token
  uint64_t seed = 0;
};

// Returns the gen_length generated ids (the prompt is not repeated).
std::vector<int32_t> diffusion_generate(LanguageModel& model, const std::vector<int32_t>& prompt,
                                        const DiffusionSampleOptions& opt);

// How many tokens each of `steps` steps commits when `masked` tokens remain in a block.
std::vector<int64_t> tokens_per_step(int64_t masked, int64_t steps);

struct ARSampleOptions {
  int64_t max_new_tokens = 64;
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  int32_t eod = -1;          // stop token (-1: none)
  int64_t vocab_limit = 0;
  uint64_t seed = 0;
};

std::vector<int32_t> ar_generate(LanguageModel& model, const std::vector<int32_t>& prompt, const ARSampleOptions& opt);

}  // namespace megadlm
