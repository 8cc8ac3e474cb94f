#pragma once
// One denoising step of one sequence's block: the commit rules the diffusion samplers share
// (infer/sampling.h's LLaDA reverse process and MDLM ancestral sampler, infer/block_sampling.h's
// block diffusion). The masked positions of the block get a proposal x0 (argmax, with Gumbel noise
// at temperature > 0) and a confidence (the proposal's softmax probability, or a uniform draw for
// random remasking); then
//   LLaDA               the `scheduled` most confident proposals are committed (ties: leftmost first);
//   LLaDA + threshold   every proposal above the threshold, at least the most confident one;
//   MDLM                each masked position is revealed with probability 1 / (steps - step), the
//                       last step reveals the rest.
// The random draws are keyed by the sampler's step counter and the absolute canvas position, so a
// seed gives the same tokens whatever the batch.
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "infer/sampling.h"

namespace megadlm {

struct DenoiseRule {
  DiffusionSampler sampler = DiffusionSampler::LLaDA;
  Remasking remasking = Remasking::LowConfidence;
  float temperature = 0.0f;
  float threshold = 0.0f;   // > 0: LLaDA's threshold decoding
  float cfg_scale = 0.0f;   // > 0: the logits are un + (s + 1) (cond - un)
  int32_t mask_token = -1;
  int64_t vocab = 0;        // V, the length of a logits row
  int64_t vocab_limit = 0;  // proposals from ids [0, vocab_limit) minus the mask token
};

struct DenoiseStep {
  int64_t begin = 0, end = 0;   // the block: canvas positions [begin, end)
  int64_t step = 0, steps = 0;  // step `step` of the block's `steps`
  int64_t scheduled = 0;        // LLaDA without threshold: how many proposals to commit
  uint64_t counter = 0;         // the sampler's step counter, which keys the random draws
};

// x: one sequence's canvas. rows: the logits of position begin + i at rows + i * V; un_rows the
// unconditional canvas's under CFG (else null). Commits into x and describes the step in `trace`
// (its seq, block and step left to the caller); false, with x untouched, when the block has no
// masked position.
bool denoise_block_step(const DenoiseRule& rule, const DenoiseStep& step, const float* rows, const float* un_rows,
                        int32_t* x, const CounterRng& rng, std::vector<float>& work, DiffusionStepTrace& trace);

}  // namespace megadlm
