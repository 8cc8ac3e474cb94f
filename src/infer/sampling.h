#pragma once
// Samplers over a LanguageModel, batched.
//
// Diffusion (LLaDA's reverse process): the canvas is the prompt followed by gen_length mask tokens.
// The generation is cut into blocks of block_length, decoded left to right (semi-autoregressive when
// block_length < gen_length); each block gets steps / num_blocks steps. At every step the model
// predicts all positions; in the current block, the masked positions get a proposal x0 (argmax, with
// Gumbel noise at temperature > 0), and the k most confident proposals are committed, with k spread
// evenly over the block's steps (the first steps take the remainder). Confidence is the softmax
// probability of the proposal (low_confidence remasking) or a uniform draw (random remasking).
// Options on top:
//   cfg_scale > 0   classifier-free guidance as LLaDA: a second, unconditional canvas has the prompt
//                   masked; logits = un + (s + 1) (cond - un).
//   threshold > 0   Fast-dLLM's parallel decoding: each step commits every masked token of the block
//                   whose confidence exceeds the threshold, at least the most confident one; the
//                   step count is then data dependent (`steps` is ignored).
//   prefix_cache    Fast-dLLM's approximate prefix cache: at the first step of a block the whole
//                   canvas runs and every row's keys/values are cached; the block's later steps run
//                   only the rows from the block on, against the cached prefix rows (which are stale:
//                   in the exact sampler they would see the block's new tokens).
//   sampler MDLM    ancestral sampling (Sahoo et al.): within a block of S steps, at step s each masked
//                   token is revealed with probability 1 / (S - s) (the (t - s) / t of a linear
//                   schedule), its value drawn from the model's distribution at `temperature`
//                   (argmax at 0); the last step reveals the rest.
//
// Autoregressive: greedy or temperature / top-k / top-p sampling, stopping at end-of-document, with
// a KV cache (each new token runs one row through the model) or, as a reference, re-running the whole
// prefix each token.
//
// Randomness comes from Philox(seed + b, Sampling) for the b-th sequence of a batch, so a seed gives
// the same text on any thread count and batch composition.
//
// A model that reads more than tokens (LLaVA's images, MicroBatch::pixels) gets them through the
// options' `inputs`, called before every forward whose rows hold prompts: the diffusion canvases' forwards
// from position 0 (prompts 0..B-1; the unconditional canvases of cfg hold masks only), the autoregressive
// prefill of prompt b (or its whole-prefix forwards without the KV cache). The decode steps after them
// hold no prompt rows.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/philox.h"
#include "models/language_model.h"

namespace megadlm {

// Puts into mb what the model reads beside the tokens for prompts [first, first + count) of the batch, the
// rows of mb holding those prompts in order.
using PromptInputs = std::function<void(int64_t first, int64_t count, MicroBatch& mb)>;

enum class Remasking : uint8_t { LowConfidence, Random };
Remasking remasking_from_name(const std::string& name);  // low_confidence | random

enum class DiffusionSampler : uint8_t { LLaDA, MDLM };
DiffusionSampler diffusion_sampler_from_name(const std::string& name);  // llada | mdlm

// What one step did to one sequence (for tests and diagnostics).
struct DiffusionStepTrace {
  int64_t seq = 0, block = 0, step = 0;
  int64_t scheduled = -1;              // tokens the schedule asked for (-1: threshold / MDLM)
  std::vector<float> committed_conf;   // confidences of the committed proposals
  std::vector<float> skipped_conf;     // confidences of the masked positions left masked
};

struct DiffusionStats {
  int64_t steps = 0;           // model calls (each over the whole batch)
  int64_t rows_computed = 0;   // token rows run through the model, summed over calls
};

struct DiffusionSampleOptions {
  int64_t gen_length = 64;
  int64_t steps = 64;
  int64_t block_length = 64;
  float temperature = 0.0f;
  Remasking remasking = Remasking::LowConfidence;
  DiffusionSampler sampler = DiffusionSampler::LLaDA;
  float cfg_scale = 0.0f;
  float threshold = 0.0f;      // > 0: confidence-threshold parallel decoding
  bool prefix_cache = false;
  int32_t mask_token = -1;
  int64_t vocab_limit = 0;     // proposals restricted to ids [0, vocab_limit) minus the mask token
  uint64_t seed = 0;
  std::vector<uint64_t> seeds;  // when set, one per sequence of a batch (instead of seed + b)
  std::vector<DiffusionStepTrace>* trace = nullptr;
  DiffusionStats* stats = nullptr;
  PromptInputs inputs;  // empty: the tokens are all the model reads
};

// Returns the gen_length generated ids (the prompt is not repeated).
std::vector<int32_t> diffusion_generate(LanguageModel& model, const std::vector<int32_t>& prompt,
                                        const DiffusionSampleOptions& opt);
// All prompts must have the same length; sequence b uses seed opt.seed + b.
std::vector<std::vector<int32_t>> diffusion_generate_batch(LanguageModel& model,
                                                           const std::vector<std::vector<int32_t>>& prompts,
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
  std::vector<uint64_t> seeds;  // when set, one per sequence of a batch (instead of seed + b)
  bool kv_cache = true;
  PromptInputs inputs;  // empty: the tokens are all the model reads
};

// The next token from one row of logits [V], restricted to ids [0, Vlim): the argmax at temperature 0,
// else a draw from the softmax of logits / temperature cut to the top_k most likely and then to the
// smallest set whose probability reaches top_p, with the uniform number n of `rng` (n: the index of the
// new token in its sequence). Shared by every left-to-right sampler (GPT here, T5 in
// infer/t5_generation.h).
int32_t ar_next_token(const float* row, int64_t Vlim, const ARSampleOptions& opt, const CounterRng& rng, int64_t n);
// Sequence b's generator of a batch of B: Philox(seeds[b], Sampling) when seeds are given, else
// Philox(seed + b, Sampling).
std::vector<CounterRng> sequence_rngs(uint64_t seed, const std::vector<uint64_t>& seeds, int64_t B);

std::vector<int32_t> ar_generate(LanguageModel& model, const std::vector<int32_t>& prompt, const ARSampleOptions& opt);
// Prompts of any lengths; sequence b uses seed opt.seed + b. With the KV cache the decode steps run
// all sequences together.
std::vector<std::vector<int32_t>> ar_generate_batch(LanguageModel& model,
                                                    const std::vector<std::vector<int32_t>>& prompts,
                                                    const ARSampleOptions& opt);

}  // namespace megadlm
