#include "objectives/block_diffusion.h"

#include <cstdio>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "core/philox.h"

namespace megadlm {

namespace {
// Validation noise is drawn from its own seed so that it never repeats the training draws.
constexpr uint64_t kEvalSeedSalt = 0x9e3779b97f4a7c15ull;

void check_options(const BlockDiffusionOptions& opt) {
  MEGADLM_CHECK(opt.mask_token >= 0, "the block diffusion objective needs a mask token (--mask-token)");
  MEGADLM_CHECK(opt.block_length > 0, "--block-diffusion needs --block-length > 0, got ", opt.block_length);
  MEGADLM_CHECK(opt.clip_min >= 0 && opt.clip_min <= opt.clip_max && opt.clip_max <= 1, "--bd3-clip-min ",
                opt.clip_min, " and --bd3-clip-max ", opt.clip_max, " must satisfy 0 <= min <= max <= 1");
}
}  // namespace

double block_diffusion_time(const BlockDiffusionOptions& opt, uint64_t sample_index, int64_t block) {
  const CounterRng rng(opt.seed, RngPurpose::DiffusionTime);
  const double u = rng.uniform_double(sample_index, static_cast<uint32_t>(block));
  return opt.clip_min + (opt.clip_max - opt.clip_min) * u;
}

ObjectiveStats block_diffusion_batch(const BlockDiffusionOptions& opt, const int32_t* tokens, int64_t B, int64_t T,
                                     int64_t stride, const std::vector<double>& t, const std::vector<uint8_t>& masked,
                                     float micro_batch_weight, MicroBatch& out) {
  check_options(opt);
  const int64_t L = opt.block_length;
  MEGADLM_CHECK(T % L == 0, "--seq-length ", T, " is not a multiple of --block-length ", L);
  const int64_t nb = T / L, T2 = 2 * T;
  MEGADLM_CHECK(static_cast<int64_t>(t.size()) == B * nb && static_cast<int64_t>(masked.size()) == B * T,
                "block diffusion draws: ", t.size(), " noise levels and ", masked.size(), " mask decisions for ", B,
                " rows of ", nb, " blocks of ", L);
  out.reset(B, T2, micro_batch_weight);
  out.segment_ids.clear();
  out.block_diffusion = L;
  ObjectiveStats stats;
  // Each row's loss is a mean over its T tokens, the micro-batch's the mean of its rows.
  const double norm = static_cast<double>(micro_batch_weight) / static_cast<double>(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* x0 = tokens + b * stride;
    int32_t* inp = out.tokens.data() + b * T2;
    int32_t* tgt = out.targets.data() + b * T2;
    float* w = out.weights.data() + b * T2;
    int32_t* pos = out.positions.data() + b * T2;
    std::iota(pos, pos + T, 0);
    std::iota(pos + T, pos + T2, 0);
    std::copy(x0, x0 + T, inp + T);  // the clean copy: input only
    std::fill(tgt + T, tgt + T2, kIgnoreIndex);
    std::fill(w + T, w + T2, 0.0f);
    double t_sum = 0;
    for (int64_t i = 0; i < T; ++i) {
      const double tb = t[static_cast<size_t>(b * nb + i / L)];
      const bool m = masked[static_cast<size_t>(b * T + i)] != 0;
      inp[i] = m ? opt.mask_token : x0[i];
      tgt[i] = m ? x0[i] : kIgnoreIndex;
      w[i] = m ? static_cast<float>(norm / tb) : 0.0f;
      stats.loss_tokens += m;
    }
    for (int64_t k = 0; k < nb; ++k) t_sum += t[static_cast<size_t>(b * nb + k)];
    stats.sum_t += t_sum / static_cast<double>(nb);
  }
  stats.real_tokens = static_cast<double>(B * T);
  stats.sequences = static_cast<double>(B);
  return stats;
}

BlockDiffusion::BlockDiffusion(const BlockDiffusionOptions& opt) : opt_(opt) { check_options(opt_); }

ObjectiveStats BlockDiffusion::prepare(const SampleBatch& in, float micro_batch_weight, MicroBatch& out) const {
  const int64_t B = in.B, T = in.T, L = opt_.block_length;
  MEGADLM_CHECK(T % L == 0, "--seq-length ", T, " is not a multiple of --block-length ", L);
  const int64_t nb = T / L;
  const CounterRng mask_rng(opt_.seed, RngPurpose::DiffusionMask);
  std::vector<double> t(static_cast<size_t>(B * nb));
  std::vector<uint8_t> masked(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    const uint64_t sample = in.first_sample + static_cast<uint64_t>(b);
    for (int64_t k = 0; k < nb; ++k) t[static_cast<size_t>(b * nb + k)] = block_diffusion_time(opt_, sample, k);
    for (int64_t i = 0; i < T; ++i)
      masked[static_cast<size_t>(b * T + i)] =
          mask_rng.uniform(sample, static_cast<uint32_t>(i)) < t[static_cast<size_t>(b * nb + i / L)];
  }
  return block_diffusion_batch(opt_, in.tokens.data(), B, T, T + 1, t, masked, micro_batch_weight, out);
}

std::unique_ptr<Objective> BlockDiffusion::for_evaluation() const {
  BlockDiffusionOptions o = opt_;
  o.seed ^= kEvalSeedSalt;
  o.clip_min = o.eps;
  o.clip_max = 1.0;
  return std::make_unique<BlockDiffusion>(o);
}

std::string BlockDiffusion::describe() const {
  std::ostringstream os;
  os << "block diffusion (BD3-LM): mask token " << opt_.mask_token << ", block length " << opt_.block_length
     << ", t per block ~ U[" << opt_.clip_min << ", " << opt_.clip_max << "], layout [x_t ; x_0]";
  return os.str();
}

std::string BlockDiffusion::log_fields(const ObjectiveStats& s) const { return diffusion_log_fields(s); }

void BlockDiffusion::add_metrics(const ObjectiveStats& s, nlohmann::json& j) const { add_diffusion_metrics(s, j); }

}  // namespace megadlm
