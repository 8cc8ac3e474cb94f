#pragma once
// Log-likelihoods for evaluation.
//
// Autoregressive: exact, log p(x_[begin,T) | x_[0,begin)) = sum_i log softmax(logits_{i-1})[x_i].
//
// Diffusion: the negative ELBO of the masked diffusion model (LLaDA eq. (3) / MDLM), of the tokens
// [begin, T) given the prefix [0, begin) (never masked; begin = 0 for unconditional text):
//   -log p(x) <= E_{l ~ U{1..L}} E_{mask of l of the L positions} [ (L / l) sum_{masked i} -log p(x_i | x_masked) ]
// which equals the continuous-time form E_t[(1/t) sum_masked CE] with each token masked at rate t.
// The Monte Carlo draws take t on a randomly shifted lattice, t_j = (j + u) / M (stratified, low
// discrepancy), and l = ceil(t L), which is exactly uniform on {1..L} while spreading the draws over
// all mask ratios. The standard error is the plain sample one (conservative for a stratified design).
// With cfg_scale > 0 the logits are LLaDA's guided ones: un + (s + 1)(cond - un), the unconditional
// pass having the prefix masked too.
#include <cstdint>
#include <functional>
#include <vector>

#include "models/language_model.h"

namespace megadlm {

// What a forward needs beside the tokens of the scored sequence, put into each forward's micro-batch:
// `copies` is how many of its rows hold the sequence with its prompt unmasked (LLaVA: the sequence's
// images, that many times, into MicroBatch::pixels; infer/llava_prompts.h). Empty for a text model.
using SequenceInputs = std::function<void(int64_t copies, MicroBatch& mb)>;

double ar_log_likelihood(LanguageModel& model, const std::vector<int32_t>& tokens, int64_t begin,
                         const SequenceInputs& inputs = nullptr);

// Classifier-free guidance of one logit: un + (scale + 1) (cond - un). Equal logits give that logit
// (what the formula gives for finite ones), so the -inf logit of a padded vocabulary row
// (nn/lm_head.h) stays -inf instead of becoming NaN.
inline float cfg_logit(float cond, float un, float scale) {
  return cond == un ? cond : un + (scale + 1.0f) * (cond - un);
}

struct DiffusionLikelihoodOptions {
  int32_t mask_token = -1;
  int64_t mc_samples = 64;
  int64_t batch = 16;      // masked copies run per model call
  float cfg_scale = 0.0f;
  uint64_t seed = 0;
};

struct MCEstimate {
  double mean = 0;  // estimate of the negative ELBO (nats, summed over the L tokens)
  double se = 0;    // standard error of the mean
  int64_t samples = 0;
};

// sample_id keys the randomness (e.g. the sequence's index in a dataset). Under guidance the unconditional
// rows have the whole prefix masked (an image in it too): `inputs` counts the conditional rows only.
MCEstimate diffusion_nll(LanguageModel& model, const std::vector<int32_t>& tokens, int64_t begin,
                         const DiffusionLikelihoodOptions& opt, uint64_t sample_id,
                         const SequenceInputs& inputs = nullptr);

// Block diffusion (BD3-LM, objectives/block_diffusion.h): the negative ELBO of tokens [T] (T a multiple of
// the model's block length L') under the training layout [x_t ; x_0]:
//   -log p(x) <= E_{t_1..t_B ~ U[eps, 1]} [ sum over blocks b, masked i of b of -log p(x_i | x_t of b, x_<b) / t_b ]
// with each token of block b masked at rate t_b. Draw j takes every block's t on a randomly shifted
// lattice, t_b = eps + (1 - eps) (j + u_b) / M (u_b per block, so the blocks' levels are independent and
// each is stratified over the draws); opt.batch copies run per model call, cfg_scale is not used.
MCEstimate block_diffusion_nll(LanguageModel& model, const std::vector<int32_t>& tokens,
                               const DiffusionLikelihoodOptions& opt, double eps, uint64_t sample_id);

struct ChoiceItem {
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> choices;
  int64_t label = 0;
  SequenceInputs inputs;  // the context's images, for every choice's forwards (empty: none)
};

struct ChoiceResults {
  double accuracy = 0;       // argmax of the log-likelihood
  double accuracy_norm = 0;  // argmax of the log-likelihood per token
  std::vector<int64_t> predictions;
  std::vector<std::vector<double>> scores;  // log-likelihood (DLM: minus the negative-ELBO estimate)
};

// Scores every choice as a continuation of its context (AR exactly; DLM by diffusion_nll, with the
// item index as the randomness key, so scores of the choices of one item share their draws).
ChoiceResults score_multiple_choice(LanguageModel& model, bool diffusion, const std::vector<ChoiceItem>& items,
                                    const DiffusionLikelihoodOptions& opt);

}  // namespace megadlm
