#include "objectives/masked_diffusion.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "core/philox.h"
#include "objectives/documents.h"

namespace megadlm {

namespace {
// Validation noise is drawn from its own seed so that it never repeats the training draws.
constexpr uint64_t kEvalSeedSalt = 0x9e3779b97f4a7c15ull;
}  // namespace

DiffusionLoss diffusion_loss_from_name(const std::string& name) {
  if (name == "llada") return DiffusionLoss::LLaDA;
  if (name == "mdlm") return DiffusionLoss::MDLM;
  if (name == "megadlms") return DiffusionLoss::MegaDLMs;
  fail("--dlm-loss: unknown value '", name, "' (expected llada, mdlm or megadlms)");
}

const char* diffusion_loss_name(DiffusionLoss loss) {
  switch (loss) {
    case DiffusionLoss::LLaDA: return "llada";
    case DiffusionLoss::MDLM: return "mdlm";
    case DiffusionLoss::MegaDLMs: return "megadlms";
  }
  return "?";
}

double diffusion_time(const DiffusionOptions& opt, uint64_t sample_index) {
  const CounterRng rng(opt.seed, RngPurpose::DiffusionTime);
  if (opt.loss != DiffusionLoss::MDLM) return rng.uniform_double(sample_index, 0);
  // Antithetic: the samples of one global batch share one offset u and are spread evenly over [0, 1).
  const uint64_t gb = static_cast<uint64_t>(std::max<int64_t>(1, opt.global_batch_size));
  const uint64_t batch_start = sample_index / gb * gb;
  const double u = rng.uniform_double(batch_start, 0);
  const double t = u + static_cast<double>(sample_index - batch_start) / static_cast<double>(gb);
  return t - std::floor(t);
}

ObjectiveStats MaskedDiffusion::prepare(const SampleBatch& in, float micro_batch_weight, MicroBatch& out) const {
  const DiffusionOptions& opt = opt_;
  MEGADLM_CHECK(opt.mask_token >= 0, "the diffusion objective needs a mask token (--mask-token)");
  const int64_t B = in.B, T = in.T, N = B * T;
  MEGADLM_CHECK(in.loss_mask.empty() || in.loss_mask.size() == in.tokens.size(), "diffusion objective: a loss mask of ",
                in.loss_mask.size(), " values for ", in.tokens.size(), " tokens");
  const bool sft = !in.loss_mask.empty();
  out.reset(B, T, micro_batch_weight);
  bool use_segments = opt.reset_attention_mask;
  ObjectiveStats stats;

  const CounterRng mask_rng(opt.seed, RngPurpose::DiffusionMask);
  const CounterRng len_rng(opt.seed, RngPurpose::VariableLength);
  std::vector<float> row_weight(B, 0.0f);
  std::vector<int64_t> row_len(B, T);
  std::vector<int64_t> row_response(B, 0);  // --sft: the response tokens of each row
  int64_t real_tokens = 0;

  for (int64_t b = 0; b < B; ++b) {
    const uint64_t sample = in.first_sample + static_cast<uint64_t>(b);
    const int32_t* row = in.tokens.data() + b * (T + 1);
    // --sft: position i may be masked (and carry loss) only when its label is a response token.
    const uint8_t* lm = sft ? in.loss_mask.data() + b * (T + 1) + (opt.shift ? 1 : 0) : nullptr;
    int32_t* inp = out.tokens.data() + b * T;
    int32_t* tgt = out.targets.data() + b * T;
    document_positions_and_segments(row, T, opt.eod, opt.reset_position_ids, opt.reset_attention_mask,
                                    out.positions.data() + b * T, out.segment_ids.data() + b * T);
    // Variable length: this row trains on its first L tokens; the rest is padding that nothing attends to.
    int64_t L = T;
    if (!sft && opt.varilen_prob > 0 && len_rng.uniform_double(sample, 0) < opt.varilen_prob) {
      L = 1 + static_cast<int64_t>(len_rng.uniform_double(sample, 1) * static_cast<double>(T));
      L = std::min(L, T);
      use_segments = true;
      for (int64_t i = L; i < T; ++i) out.segment_ids[b * T + i] = std::numeric_limits<int32_t>::max();
    }
    row_len[b] = L;

    const double t = diffusion_time(opt, sample);
    const double p = (1.0 - opt.eps) * t + opt.eps;
    int64_t masked = 0, argmin = 0, response = 0;
    float umin = 2.0f;
    for (int64_t i = 0; i < T; ++i) {
      const bool may_mask = i < L && (!lm || lm[i] != 0);
      response += may_mask;
      // The label of position i: the token itself (no shift) or the next one (shift).
      const int32_t x0 = opt.shift ? row[i + 1] : row[i];
      const float u = mask_rng.uniform(sample, static_cast<uint32_t>(i));
      const bool is_masked = may_mask && u < p;
      if (opt.shift) {
        // Shifted mode: the input keeps token i; position i predicts token i+1, itself masked in the input.
        inp[i] = row[i];
      } else {
        inp[i] = is_masked ? opt.mask_token : row[i];
      }
      tgt[i] = is_masked ? x0 : kIgnoreIndex;
      masked += is_masked;
      if (may_mask && u < umin) {
        umin = u;
        argmin = i;
      }
    }
    if (opt.shift) {
      // Apply the masks to the inputs: position i+1's input is masked when the target at i is.
      for (int64_t i = 0; i + 1 < T; ++i)
        if (tgt[i] != kIgnoreIndex) inp[i + 1] = opt.mask_token;
    }
    row_response[b] = response;
    real_tokens += response;
    if (opt.loss == DiffusionLoss::MegaDLMs && masked == 0 && response > 0) {
      // At least one masked token per row: the one whose draw came closest to being masked.
      tgt[argmin] = opt.shift ? row[argmin + 1] : row[argmin];
      if (opt.shift) {
        if (argmin + 1 < T) inp[argmin + 1] = opt.mask_token;
      } else {
        inp[argmin] = opt.mask_token;
      }
      masked = 1;
    }
    const double p_eff = opt.loss == DiffusionLoss::MegaDLMs && response > 0
                             ? static_cast<double>(masked) / static_cast<double>(response)
                             : p;
    row_weight[b] = static_cast<float>(1.0 / p_eff);
    stats.loss_tokens += static_cast<double>(masked);
    stats.sum_t += t;
  }
  // Normalisation: LLaDA and MegaDLMs divide by B*L, MDLM by the real tokens of the micro-batch; --sft
  // (every loss) by each row's response length, then by B (LLaDA's SFT recipe).
  const double denom = opt.loss == DiffusionLoss::MDLM ? static_cast<double>(std::max<int64_t>(1, real_tokens))
                                                       : static_cast<double>(N);
  for (int64_t b = 0; b < B; ++b) {
    const double row_denom =
        sft ? static_cast<double>(std::max<int64_t>(1, row_response[b])) * static_cast<double>(B) : denom;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t n = b * T + i;
      out.weights[n] =
          out.targets[n] == kIgnoreIndex ? 0.0f : static_cast<float>(row_weight[b] * micro_batch_weight / row_denom);
    }
  }
  if (!use_segments) out.segment_ids.clear();
  stats.real_tokens = static_cast<double>(real_tokens);
  stats.sequences = static_cast<double>(B);
  return stats;
}

std::unique_ptr<Objective> MaskedDiffusion::for_evaluation() const {
  DiffusionOptions o = opt_;
  o.seed ^= kEvalSeedSalt;
  o.varilen_prob = 0;  // evaluate at full length
  return std::make_unique<MaskedDiffusion>(o);
}

std::string MaskedDiffusion::describe() const {
  std::ostringstream os;
  os << "diffusion: mask token " << opt_.mask_token << ", eps " << opt_.eps << ", loss "
     << diffusion_loss_name(opt_.loss)
     << ", varilen prob " << opt_.varilen_prob << ", mode " << (opt_.shift ? "vanilla" : "difflm-noshift");
  return os.str();
}

std::string diffusion_log_fields(const ObjectiveStats& s) {
  char buf[96];
  std::snprintf(buf, sizeof buf, " | mean t %.3f | masked %.3f", s.sum_t / s.sequences, s.loss_tokens / s.real_tokens);
  return buf;
}

void add_diffusion_metrics(const ObjectiveStats& s, nlohmann::json& j) {
  j["mean_t"] = s.sum_t / s.sequences;
  j["masked_fraction"] = s.loss_tokens / s.real_tokens;
}

std::string MaskedDiffusion::log_fields(const ObjectiveStats& s) const { return diffusion_log_fields(s); }

void MaskedDiffusion::add_metrics(const ObjectiveStats& s, nlohmann::json& j) const { add_diffusion_metrics(s, j); }

}  // namespace megadlm
