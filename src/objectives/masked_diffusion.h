#pragma once
// The masked diffusion objective (LLaDA / MDLM / MegaDLMs variants).
//
// For each sequence a noise level t ~ U(0, 1) gives a mask probability p = (1 - eps) t + eps; each token
// is replaced by the mask token with probability p, and the model is trained to recover the masked
// tokens (bidirectional attention, no shift):
//   llada    : loss = sum over masked tokens of CE / p, divided by B * L
//   mdlm     : t antithetic across the global batch (t_i = frac(u + i / GB)), normalised by real tokens
//   megadlms : p is the realised masked fraction of the row, at least one masked token per row
// All randomness is drawn from Philox keyed by the run seed and indexed by the global sample index
// and the token position: t with purpose DiffusionTime at (sample, 0), the mask decision with
// DiffusionMask at (sample, position), the variable length with VariableLength at (sample, 0). The
// noise therefore does not depend on threads, ranks, the micro-batch split, or a resume.
#include <cstdint>
#include <string>

#include "objectives/objective.h"

namespace megadlm {

enum class DiffusionLoss : uint8_t { LLaDA, MDLM, MegaDLMs };
DiffusionLoss diffusion_loss_from_name(const std::string& name);  // llada | mdlm | megadlms
const char* diffusion_loss_name(DiffusionLoss loss);

struct DiffusionOptions {
  uint64_t seed = 1234;
  int32_t mask_token = -1;
  int32_t eod = -1;
  float eps = 1e-3f;                 // --dlm-eps
  DiffusionLoss loss = DiffusionLoss::LLaDA;
  float varilen_prob = 0.01f;        // --difflm-varilen-prob
  bool shift = false;                // --model-running-mode vanilla: predict token i+1 at position i
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  int64_t global_batch_size = 1;     // for MDLM's antithetic t
};

// The noise level t of a sample (before the eps floor); exposed for tests and for evaluation.
double diffusion_time(const DiffusionOptions& opt, uint64_t sample_index);

class MaskedDiffusion final : public Objective {
 public:
  explicit MaskedDiffusion(const DiffusionOptions& opt) : opt_(opt) {}
  // The masked inputs, the targets at the masked positions, and the weights of the chosen loss with
  // micro_batch_weight folded in.
  ObjectiveStats prepare(const SampleBatch& samples, float micro_batch_weight, MicroBatch& out) const override;
  // Evaluation draws its noise from a seed of its own (never the training draws) at full length.
  std::unique_ptr<Objective> for_evaluation() const override;
  std::string describe() const override;
  // " | mean t 0.503 | masked 0.497": the mean noise level and the masked fraction of the real tokens.
  std::string log_fields(const ObjectiveStats& interval) const override;
  void add_metrics(const ObjectiveStats& interval, nlohmann::json& j) const override;
  const char* perplexity_name() const override { return "ppl (ELBO bound)"; }

 private:
  DiffusionOptions opt_;
};

}  // namespace megadlm
