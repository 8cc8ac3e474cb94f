#pragma once
// The block diffusion objective (BD3-LM: Arriola et al., "Block Diffusion", ICLR 2025).
//
// A sequence x of T tokens is cut into T / L' blocks of L' tokens. Block b gets a noise level t_b drawn
// uniformly from [clip_min, clip_max] (the clipped schedule; evaluation uses [eps, 1], where the loss is
// a bound on the negative log-likelihood); each of its tokens is replaced by the mask token with
// probability t_b (the log-linear schedule) and carries the loss weight 1 / t_b.
//
// The model input is the vectorised layout [x_t ; x_0] of 2T tokens with positions [0..T-1, 0..T-1] and
// MaskType::BlockDiffusion attention (kernels/types.h): noised block b sees itself and the clean blocks
// before it, which is exactly what block b sees when it is sampled after the clean blocks 0..b-1 under
// the model's own block_causal mask. Targets are the masked tokens of the noised half only; the loss is
//   sum over rows, masked i in the noised half of CE_i / t_{block(i)}, divided by B * T
// (a per-token NELBO over the T tokens of each row; the clean half is input only).
//
// Randomness comes from Philox keyed by the run seed and the global sample index: t_b with purpose
// DiffusionTime at (sample, b), the mask decision of position i with DiffusionMask at (sample, i), as
// the masked diffusion objective draws its own; so the noise does not depend on threads, ranks, the
// micro-batch split or a resume.
#include <cstdint>
#include <string>
#include <vector>

#include "objectives/objective.h"

namespace megadlm {

struct BlockDiffusionOptions {
  uint64_t seed = 1234;
  int32_t mask_token = -1;
  int64_t block_length = 0;  // L' (--block-length); divides the sequence length
  double clip_min = 1e-3;    // t_b ~ U[clip_min, clip_max] (--bd3-clip-min, default --dlm-eps)
  double clip_max = 1.0;     // (--bd3-clip-max)
  double eps = 1e-3;         // --dlm-eps: evaluation's lower end of t
};

// Block b's noise level for a sample: the mask probability of its tokens.
double block_diffusion_time(const BlockDiffusionOptions& opt, uint64_t sample_index, int64_t block);

// The layout and loss of given draws, the entry point that tests and the reference fixture share with
// prepare: tokens [B, T] (row stride `stride`, T + 1 for a SampleBatch), t [B, T / L'] the blocks' noise
// levels, masked [B, T] (non-zero: position replaced by the mask token). Fills out as prepare does.
ObjectiveStats block_diffusion_batch(const BlockDiffusionOptions& opt, const int32_t* tokens, int64_t B, int64_t T,
                                     int64_t stride, const std::vector<double>& t, const std::vector<uint8_t>& masked,
                                     float micro_batch_weight, MicroBatch& out);

class BlockDiffusion final : public Objective {
 public:
  explicit BlockDiffusion(const BlockDiffusionOptions& opt);
  // The 2T layout of each sample, its targets in the noised half and the weights 1 / t_b / (B T).
  ObjectiveStats prepare(const SampleBatch& samples, float micro_batch_weight, MicroBatch& out) const override;
  // Evaluation draws from a seed of its own over the unclipped [eps, 1], the range of the valid bound.
  std::unique_ptr<Objective> for_evaluation() const override;
  std::string describe() const override;
  // " | mean t 0.503 | masked 0.497": the mean of the blocks' noise levels and the masked fraction.
  std::string log_fields(const ObjectiveStats& interval) const override;
  void add_metrics(const ObjectiveStats& interval, nlohmann::json& j) const override;
  const char* perplexity_name() const override { return "ppl (ELBO bound)"; }

 private:
  BlockDiffusionOptions opt_;
};

}  // namespace megadlm
