#pragma once
// Block diffusion sampling (BD3-LM, Arriola et al. 2025): the text grows block by block, blocks of
// L = block_length tokens. Block b starts as mask tokens and is denoised over `steps` steps, each a
// model call on [committed blocks < b ; block b] under which the block sees itself
// (bidirectionally) and every committed block before it, and a commit by the rules of
// infer/denoise_step.h (MDLM's ancestral reveal, or LLaDA's most-confident-first / threshold
// commits). Then block b is committed and block b + 1 starts. This visibility is an ordinary
// block-causal mask of block L, so the sampler needs a model whose config has attention mask
// block_causal with attention_block_size L.
//
// Prompt: its whole blocks are the first committed blocks. A prompt of P = q L + r tokens with r > 0
// ends inside block q: that block is the first one generated, its r prompt tokens fixed (never
// masked) and its L - r other positions denoised.
// Length: blocks are generated until the canvas covers P + max_new_tokens positions, and never past
// the last whole block within the model's max_position_embeddings; the last block is denoised
// whole and the tokens past max_new_tokens are dropped. A sequence stops after the block in which
// it commits `eod` (>= 0): its tokens end before that eod (as ar_generate's), and the sampler stops
// when every sequence has.
//
// KV cache (kv_cache = true): the cache holds the keys/values of the committed blocks only. The
// prompt's whole blocks run once, block by block; each denoising step runs the L rows of the block
// against the cached rows before it (writing the block's noisy keys/values to its own rows, which
// nothing else reads); once the block is committed its clean tokens run once more, and their
// keys/values replace the noisy ones. Without the cache (the reference), every step starts from an
// empty cache and runs every committed block, block by block, then the noised block: the same
// model calls with the same inputs as the cached sampler made for the committed blocks, so both
// give the same logits bit for bit and hence the same tokens, greedy or seeded.
//
// Batches: prompts of one length (their blocks line up), each sequence with its own random stream
// Philox(seed + b) or seeds[b] as the other samplers. Finished sequences still run (their rows are
// ignored) so that the model calls do not depend on when the others finish.
#include <cstdint>
#include <string>
#include <vector>

#include "infer/sampling.h"
#include "models/language_model.h"
#include "nn/kv_cache.h"

namespace megadlm {

struct BlockSampleOptions {
  int64_t block_length = 0;     // L: must equal the model's attention_block_size
  int64_t steps = 0;            // denoising steps per block (threshold decoding: at most L, data dependent)
  int64_t max_new_tokens = 64;
  float temperature = 0.0f;
  DiffusionSampler rule = DiffusionSampler::MDLM;  // how a step commits: MDLM (ancestral) or LLaDA
  Remasking remasking = Remasking::LowConfidence;  // LLaDA's confidence
  float threshold = 0.0f;       // > 0: LLaDA's confidence-threshold decoding
  int32_t mask_token = -1;
  int32_t eod = -1;             // stop token (-1: none)
  int64_t vocab_limit = 0;      // proposals restricted to ids [0, vocab_limit) minus the mask token
  uint64_t seed = 0;
  std::vector<uint64_t> seeds;  // when set, one per sequence (instead of seed + b)
  bool kv_cache = true;
  std::vector<DiffusionStepTrace>* trace = nullptr;  // block: the block's index in the canvas
  DiffusionStats* stats = nullptr;  // steps: denoising calls; rows: every row run, clean blocks too
  // When set, the cache the sampler uses; else one of its own. With kv_cache the sampler leaves in
  // rows [0, L j) of each sequence the clean keys/values of the blocks before the last one it
  // generated (j of them).
  KVCache* cache = nullptr;
};

// Returns each prompt's generated ids (the prompt is not repeated). All prompts must have one length.
std::vector<std::vector<int32_t>> block_diffusion_generate(LanguageModel& model,
                                                           const std::vector<std::vector<int32_t>>& prompts,
                                                           const BlockSampleOptions& opt);

// An Error naming --sampler bd3 and `source` (the model's origin) unless the model's attention mask
// is block_causal, and naming --block-length unless block_length is its attention_block_size.
void check_block_diffusion_model(const TransformerConfig& cfg, int64_t block_length, const std::string& source);

}  // namespace megadlm
