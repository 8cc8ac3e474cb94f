#include "infer/denoise_step.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "infer/likelihood.h"

namespace megadlm {

namespace {

// Gumbel(0, 1) noise from a uniform draw.
float gumbel(const CounterRng& rng, uint64_t index, uint32_t position) {
  const double u = (static_cast<double>(rng.bits(index, position)[0]) + 0.5) / 4294967296.0;
  return static_cast<float>(-std::log(-std::log(u)));
}

// The proposal for position i from its logits `comb` [Vlim] (the mask token excluded) and its
// confidence.
std::pair<int32_t, float> propose(const DenoiseRule& rule, const std::vector<float>& comb, int64_t i, uint64_t counter,
                                  const CounterRng& rng) {
  const int64_t Vlim = static_cast<int64_t>(comb.size());
  const int32_t M = rule.mask_token;
  int32_t best = -1;
  float best_score = -INFINITY, maxv = -INFINITY;
  for (int64_t v = 0; v < Vlim; ++v) {
    if (v == M) continue;
    const float l = comb[static_cast<size_t>(v)];
    maxv = std::max(maxv, l);
    float score = l;
    if (rule.temperature > 0) score = l / rule.temperature + gumbel(rng, counter, static_cast<uint32_t>(i * Vlim + v));
    if (score > best_score) {
      best_score = score;
      best = static_cast<int32_t>(v);
    }
  }
  if (rule.remasking == Remasking::Random) return {best, rng.uniform(counter, static_cast<uint32_t>(i), 1)};
  double z = 0;
  for (int64_t v = 0; v < Vlim; ++v)
    if (v != M) z += std::exp(static_cast<double>(comb[static_cast<size_t>(v)] - maxv));
  return {best, static_cast<float>(std::exp(static_cast<double>(comb[static_cast<size_t>(best)] - maxv)) / z)};
}

// Which of the candidates (confidence, position) to commit, by the rule's commit rule.
std::vector<char> choose(const DenoiseRule& rule, const DenoiseStep& st,
                         const std::vector<std::pair<float, int64_t>>& cand, const CounterRng& rng, int64_t& scheduled) {
  std::vector<char> commit(cand.size(), 0);
  scheduled = -1;
  if (rule.sampler == DiffusionSampler::MDLM) {
    const double reveal = 1.0 / static_cast<double>(st.steps - st.step);
    for (size_t c = 0; c < cand.size(); ++c)
      commit[c] = st.step == st.steps - 1 ||
                  rng.uniform_double(st.counter, static_cast<uint32_t>(cand[c].second) + (1u << 30)) < reveal;
  } else if (rule.threshold > 0) {
    size_t best = 0;
    bool any = false;
    for (size_t c = 0; c < cand.size(); ++c) {
      if (cand[c].first > rule.threshold) commit[c] = any = true;
      if (cand[c].first > cand[best].first) best = c;
    }
    if (!any) commit[best] = 1;  // at least one token per step
  } else {
    // The k most confident (ties broken by position, leftmost first).
    std::vector<size_t> order(cand.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t c) { return cand[a].first > cand[c].first; });
    scheduled = st.scheduled;
    const int64_t n = std::min<int64_t>(scheduled, static_cast<int64_t>(cand.size()));
    for (int64_t c = 0; c < n; ++c) commit[order[static_cast<size_t>(c)]] = 1;
  }
  return commit;
}

}  // namespace

bool denoise_block_step(const DenoiseRule& rule, const DenoiseStep& st, const float* rows, const float* un_rows,
                        int32_t* x, const CounterRng& rng, std::vector<float>& work, DiffusionStepTrace& trace) {
  const int64_t V = rule.vocab, Vlim = rule.vocab_limit;
  const int32_t M = rule.mask_token;
  work.resize(static_cast<size_t>(Vlim));
  std::vector<std::pair<float, int64_t>> candidates;  // (confidence, position)
  std::vector<int32_t> proposal(static_cast<size_t>(st.end - st.begin), -1);
  for (int64_t i = st.begin; i < st.end; ++i) {
    if (x[i] != M) continue;
    const float* row = rows + (i - st.begin) * V;  // [V]
    const float* un = un_rows ? un_rows + (i - st.begin) * V : nullptr;
    for (int64_t v = 0; v < Vlim; ++v)
      work[static_cast<size_t>(v)] = un ? cfg_logit(row[v], un[v], rule.cfg_scale) : row[v];
    const auto [tok, conf] = propose(rule, work, i, st.counter, rng);
    proposal[static_cast<size_t>(i - st.begin)] = tok;
    candidates.emplace_back(conf, i);
  }
  if (candidates.empty()) return false;
  const std::vector<char> commit = choose(rule, st, candidates, rng, trace.scheduled);
  for (size_t c = 0; c < candidates.size(); ++c) {
    const int64_t i = candidates[c].second;
    if (commit[c]) {
      x[i] = proposal[static_cast<size_t>(i - st.begin)];
      trace.committed_conf.push_back(candidates[c].first);
    } else {
      trace.skipped_conf.push_back(candidates[c].first);
    }
  }
  return true;
}

}  // namespace megadlm
