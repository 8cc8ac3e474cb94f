#include "infer/likelihood.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "objectives/block_diffusion.h"

namespace megadlm {

namespace {

// log softmax(row)[target] over [V], in double.
double log_prob(const float* row, int64_t V, int32_t target) {
  const float mx = *std::max_element(row, row + V);
  double z = 0;
  for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v] - mx));
  return static_cast<double>(row[target] - mx) - std::log(z);
}

void check_tokens(const LanguageModel& model, const std::vector<int32_t>& tokens) {
  MEGADLM_CHECK(static_cast<int64_t>(tokens.size()) <= model.config().max_position_embeddings, "a sequence of ",
                tokens.size(), " tokens is longer than the model's --max-position-embeddings ",
                model.config().max_position_embeddings);
}

}  // namespace

double ar_log_likelihood(LanguageModel& model, const std::vector<int32_t>& tokens, int64_t begin,
                         const SequenceInputs& inputs) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  MEGADLM_CHECK(begin >= 1 && begin <= T, "autoregressive log-likelihood needs a non-empty context: begin ", begin,
                " of ", T, " tokens");
  check_tokens(model, tokens);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  MicroBatch mb;
  mb.B = 1;
  mb.T = T;
  mb.tokens = tokens;
  mb.positions = pos;
  const int64_t V = model.config().vocab_size;
  if (inputs) inputs(1, mb);
  Tensor lg = model.forward_logits(mb);
  double ll = 0;
  for (int64_t i = begin; i < T; ++i) ll += log_prob(lg.data<float>() + (i - 1) * V, V, tokens[static_cast<size_t>(i)]);
  model.arena().reset();
  return ll;
}

MCEstimate diffusion_nll(LanguageModel& model, const std::vector<int32_t>& tokens, int64_t begin,
                         const DiffusionLikelihoodOptions& opt, uint64_t sample_id, const SequenceInputs& inputs) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t L = T - begin;
  MEGADLM_CHECK(opt.mask_token >= 0, "diffusion likelihood needs the model's mask token");
  MEGADLM_CHECK(begin >= 0 && L >= 1, "diffusion likelihood needs at least one scored token: begin ", begin, " of ", T);
  MEGADLM_CHECK(opt.mc_samples >= 1, "--mc-samples must be positive, got ", opt.mc_samples);
  check_tokens(model, tokens);
  const int64_t M = opt.mc_samples;
  const int64_t V = model.config().vocab_size;
  const bool cfg = opt.cfg_scale > 0;
  const CounterRng rng(opt.seed, RngPurpose::DiffusionMask);
  const double shift = CounterRng(opt.seed, RngPurpose::DiffusionTime).uniform_double(sample_id, 0);
  const int64_t chunk = std::max<int64_t>(1, opt.batch);
  std::vector<double> draws;
  std::vector<int32_t> seq, pos;
  std::vector<char> masked;
  std::vector<std::pair<double, int64_t>> keys(static_cast<size_t>(L));
  for (int64_t j0 = 0; j0 < M; j0 += chunk) {
    const int64_t n = std::min(chunk, M - j0);
    const int64_t R = cfg ? 2 * n : n;
    seq.assign(static_cast<size_t>(R * T), 0);
    pos.resize(static_cast<size_t>(R * T));
    masked.assign(static_cast<size_t>(n * T), 0);
    std::vector<int64_t> ls(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      const int64_t j = j0 + r;
      const double t = (static_cast<double>(j) + shift) / static_cast<double>(M);
      const int64_t l = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(t * static_cast<double>(L))), 1, L);
      ls[static_cast<size_t>(r)] = l;
      // A uniformly random l-subset: the l smallest of L uniform keys.
      for (int64_t i = 0; i < L; ++i)
        keys[static_cast<size_t>(i)] = {rng.uniform_double((sample_id << 20) + static_cast<uint64_t>(j),
                                                           static_cast<uint32_t>(i)), i};
      std::nth_element(keys.begin(), keys.begin() + (l - 1), keys.end());
      std::copy(tokens.begin(), tokens.end(), seq.begin() + r * T);
      for (int64_t c = 0; c < l; ++c) {
        const int64_t i = begin + keys[static_cast<size_t>(c)].second;
        masked[static_cast<size_t>(r * T + i)] = 1;
        seq[static_cast<size_t>(r * T + i)] = opt.mask_token;
      }
      if (cfg) {
        std::copy(seq.begin() + r * T, seq.begin() + (r + 1) * T, seq.begin() + (n + r) * T);
        std::fill(seq.begin() + (n + r) * T, seq.begin() + (n + r) * T + begin, opt.mask_token);
      }
    }
    for (int64_t r = 0; r < R; ++r) std::iota(pos.begin() + r * T, pos.begin() + (r + 1) * T, 0);
    MicroBatch mb;
    mb.B = R;
    mb.T = T;
    mb.tokens = seq;
    mb.positions = pos;
    if (inputs) inputs(n, mb);
    Tensor lg = model.forward_logits(mb);
    std::vector<float> comb(static_cast<size_t>(V));
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0;
      for (int64_t i = begin; i < T; ++i) {
        if (!masked[static_cast<size_t>(r * T + i)]) continue;
        const float* row = lg.data<float>() + (r * T + i) * V;
        if (cfg) {
          const float* un = lg.data<float>() + ((n + r) * T + i) * V;
          for (int64_t v = 0; v < V; ++v) comb[static_cast<size_t>(v)] = cfg_logit(row[v], un[v], opt.cfg_scale);
          row = comb.data();
        }
        sum -= log_prob(row, V, tokens[static_cast<size_t>(i)]);
      }
      draws.push_back(sum * static_cast<double>(L) / static_cast<double>(ls[static_cast<size_t>(r)]));
    }
    model.arena().reset();
  }
  MCEstimate e;
  e.samples = M;
  double s = 0;
  for (double d : draws) s += d;
  e.mean = s / static_cast<double>(M);
  if (M > 1) {
    double ss = 0;
    for (double d : draws) ss += (d - e.mean) * (d - e.mean);
    e.se = std::sqrt(ss / static_cast<double>(M - 1) / static_cast<double>(M));
  }
  return e;
}

namespace {

// Draw j of a block diffusion NELBO: every block's t and every position's mask decision, for one row.
void block_diffusion_draw(const BlockDiffusionOptions& bo, int64_t T, int64_t M, int64_t j, uint64_t sample_id,
                          double* t, uint8_t* masked) {
  const int64_t L = bo.block_length, nb = T / L;
  const CounterRng shift_rng(bo.seed, RngPurpose::DiffusionTime), mask_rng(bo.seed, RngPurpose::DiffusionMask);
  for (int64_t k = 0; k < nb; ++k) {
    const double u = shift_rng.uniform_double(sample_id, static_cast<uint32_t>(k));
    t[k] = bo.clip_min + (1.0 - bo.clip_min) * (static_cast<double>(j) + u) / static_cast<double>(M);
  }
  const uint64_t draw = (sample_id << 20) + static_cast<uint64_t>(j);
  for (int64_t i = 0; i < T; ++i) masked[i] = mask_rng.uniform_double(draw, static_cast<uint32_t>(i)) < t[i / L];
}

}  // namespace

MCEstimate block_diffusion_nll(LanguageModel& model, const std::vector<int32_t>& tokens,
                               const DiffusionLikelihoodOptions& opt, double eps, uint64_t sample_id) {
  const TransformerConfig& cfg = model.config();
  const int64_t T = static_cast<int64_t>(tokens.size()), L = cfg.attention_block_size;
  MEGADLM_CHECK(cfg.block_diffusion && L > 0, "block diffusion likelihood needs a block diffusion model");
  MEGADLM_CHECK(opt.mask_token >= 0, "diffusion likelihood needs the model's mask token");
  MEGADLM_CHECK(T >= 1 && T % L == 0, "block diffusion likelihood: ", T, " tokens are not a multiple of the model's ",
                "block length ", L, " (--seq-length)");
  MEGADLM_CHECK(opt.mc_samples >= 1, "--mc-samples must be positive, got ", opt.mc_samples);
  MEGADLM_CHECK(eps >= 0 && eps < 1, "block diffusion likelihood: eps ", eps, " is not in [0, 1)");
  check_tokens(model, tokens);
  BlockDiffusionOptions bo;
  bo.seed = opt.seed;
  bo.mask_token = opt.mask_token;
  bo.block_length = L;
  bo.clip_min = eps;
  bo.eps = eps;
  const int64_t M = opt.mc_samples, nb = T / L, V = cfg.vocab_size;
  const int64_t chunk = std::max<int64_t>(1, opt.batch);
  std::vector<double> draws;
  for (int64_t j0 = 0; j0 < M; j0 += chunk) {
    const int64_t n = std::min(chunk, M - j0);
    std::vector<int32_t> rows(static_cast<size_t>(n * T));
    std::vector<double> t(static_cast<size_t>(n * nb));
    std::vector<uint8_t> masked(static_cast<size_t>(n * T));
    for (int64_t r = 0; r < n; ++r) {
      std::copy(tokens.begin(), tokens.end(), rows.begin() + r * T);
      block_diffusion_draw(bo, T, M, j0 + r, sample_id, t.data() + r * nb, masked.data() + r * T);
    }
    MicroBatch mb;
    block_diffusion_batch(bo, rows.data(), n, T, T, t, masked, 1.0f, mb);
    mb.targets.clear();
    mb.weights.clear();
    Tensor lg = model.forward_logits(mb);
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < T; ++i) {
        if (!masked[static_cast<size_t>(r * T + i)]) continue;
        const float* row = lg.data<float>() + (r * 2 * T + i) * V;  // the noised half of row r
        sum -= log_prob(row, V, tokens[static_cast<size_t>(i)]) / t[static_cast<size_t>(r * nb + i / L)];
      }
      draws.push_back(sum);
    }
    model.arena().reset();
  }
  MCEstimate e;
  e.samples = M;
  for (double d : draws) e.mean += d;
  e.mean /= static_cast<double>(M);
  if (M > 1) {
    double ss = 0;
    for (double d : draws) ss += (d - e.mean) * (d - e.mean);
    e.se = std::sqrt(ss / static_cast<double>(M - 1) / static_cast<double>(M));
  }
  return e;
}

ChoiceResults score_multiple_choice(LanguageModel& model, bool diffusion, const std::vector<ChoiceItem>& items,
                                    const DiffusionLikelihoodOptions& opt) {
  ChoiceResults res;
  int64_t correct = 0, correct_norm = 0;
  for (size_t q = 0; q < items.size(); ++q) {
    const ChoiceItem& it = items[q];
    MEGADLM_CHECK(!it.choices.empty(), "multiple-choice item ", q, " has no choices");
    MEGADLM_CHECK(it.label >= 0 && it.label < static_cast<int64_t>(it.choices.size()), "multiple-choice item ", q,
                  ": label ", it.label, " is not in [0, ", it.choices.size(), ")");
    std::vector<double> sc;
    int64_t best = 0, best_norm = 0;
    double best_norm_score = -INFINITY;
    for (size_t c = 0; c < it.choices.size(); ++c) {
      MEGADLM_CHECK(!it.choices[c].empty(), "multiple-choice item ", q, ": choice ", c, " is empty");
      std::vector<int32_t> seq(it.context);
      seq.insert(seq.end(), it.choices[c].begin(), it.choices[c].end());
      const int64_t begin = static_cast<int64_t>(it.context.size());
      const double ll = diffusion ? -diffusion_nll(model, seq, begin, opt, q, it.inputs).mean
                                  : ar_log_likelihood(model, seq, begin, it.inputs);
      sc.push_back(ll);
      if (ll > sc[static_cast<size_t>(best)]) best = static_cast<int64_t>(c);
      const double norm = ll / static_cast<double>(it.choices[c].size());
      if (norm > best_norm_score) {
        best_norm_score = norm;
        best_norm = static_cast<int64_t>(c);
      }
    }
    correct += best == it.label;
    correct_norm += best_norm == it.label;
    res.predictions.push_back(best);
    res.scores.push_back(std::move(sc));
  }
  if (!items.empty()) {
    res.accuracy = static_cast<double>(correct) / static_cast<double>(items.size());
    res.accuracy_norm = static_cast<double>(correct_norm) / static_cast<double>(items.size());
  }
  return res;
}

}  // namespace megadlm
