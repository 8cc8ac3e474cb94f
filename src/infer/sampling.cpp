#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace megadlm {

Remasking remasking_from_name(const std::string& name) {
  if (name == "low_confidence") return Remasking::LowConfidence;
  if (name == "random") return Remasking::Random;
  fail("--remasking: unknown value '", name, "' (expected low_confidence or random)");
}

std::vector<int64_t> tokens_per_step(int64_t masked, int64_t steps) {
  std::vector<int64_t> k(static_cast<size_t>(steps), masked / steps);
  for (int64_t i = 0; i < masked % steps; ++i) ++k[static_cast<size_t>(i)];
  return k;
}

namespace {

// Runs the model on one sequence and returns logits [T, V] (valid until the arena is reset).
Tensor logits_of(LanguageModel& model, const std::vector<int32_t>& seq, std::vector<int32_t>& positions) {
  const int64_t T = static_cast<int64_t>(seq.size());
  MDLM_CHECK(T <= model.config().max_position_embeddings, "the sequence of ", T,
             " tokens is longer than the model's --max-position-embeddings ", model.config().max_position_embeddings);
  positions.resize(static_cast<size_t>(T));
  std::iota(positions.begin(), positions.end(), 0);
  MicroBatch mb;
  mb.B = 1;
  mb.T = T;
  mb.tokens = seq.data();
  mb.positions = positions.data();
  return model.forward_logits(mb);
}

// Gumbel(0, 1) noise from a uniform draw.
float gumbel(const CounterRng& rng, uint64_t index, uint32_t position) {
  const double u = (static_cast<double>(rng.bits(index, position)[0]) + 0.5) / 4294967296.0;
  return static_cast<float>(-std::log(-std::log(u)));
}

}  // namespace

std::vector<int32_t> diffusion_generate(LanguageModel& model, const std::vector<int32_t>& prompt,
                                        const DiffusionSampleOptions& opt) {
  MDLM_CHECK(opt.mask_token >= 0, "diffusion sampling needs the model's mask token");
  MDLM_CHECK(opt.gen_length >= 1, "--gen-length must be positive");
  MDLM_CHECK(opt.block_length >= 1 && opt.gen_length % opt.block_length == 0, "--gen-length ", opt.gen_length,
             " is not a multiple of --block-length ", opt.block_length);
  const int64_t num_blocks = opt.gen_length / opt.block_length;
  MDLM_CHECK(opt.steps >= num_blocks && opt.steps % num_blocks == 0, "--steps ", opt.steps,
             " is not a multiple of the number of blocks ", num_blocks);
  const int64_t steps_per_block = opt.steps / num_blocks;
  const int64_t V = model.config().vocab_size;
  const int64_t Vlim = opt.vocab_limit > 0 ? std::min<int64_t>(opt.vocab_limit, V) : V;
  const int64_t P = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> x(prompt);
  x.resize(static_cast<size_t>(P + opt.gen_length), opt.mask_token);
  std::vector<int32_t> positions;
  const CounterRng rng(opt.seed, RngPurpose::Sampling);
  uint64_t step_counter = 0;

  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t begin = P + blk * opt.block_length, end = begin + opt.block_length;
    const std::vector<int64_t> k = tokens_per_step(opt.block_length, steps_per_block);
    for (int64_t s = 0; s < steps_per_block; ++s, ++step_counter) {
      Tensor lg = logits_of(model, x, positions);
      const float* logits = lg.data<float>();
      std::vector<std::pair<float, int64_t>> candidates;  // (confidence, position)
      std::vector<int32_t> proposal(static_cast<size_t>(end - begin), -1);
      for (int64_t i = begin; i < end; ++i) {
        if (x[static_cast<size_t>(i)] != opt.mask_token) continue;
        const float* row = logits + i * V;
        int32_t best = -1;
        float best_score = -INFINITY, maxv = -INFINITY;
        for (int64_t v = 0; v < Vlim; ++v) {
          if (v == opt.mask_token) continue;
          maxv = std::max(maxv, row[v]);
          float score = row[v];
          if (opt.temperature > 0)
            score = row[v] / opt.temperature + gumbel(rng, step_counter, static_cast<uint32_t>(i * Vlim + v));
          if (score > best_score) {
            best_score = score;
            best = static_cast<int32_t>(v);
          }
        }
        float conf;
        if (opt.remasking == Remasking::LowConfidence) {
          double z = 0;
          for (int64_t v = 0; v < Vlim; ++v)
            if (v != opt.mask_token) z += std::exp(static_cast<double>(row[v] - maxv));
          conf = static_cast<float>(std::exp(static_cast<double>(row[best] - maxv)) / z);
        } else {
          conf = rng.uniform(step_counter, static_cast<uint32_t>(i), 1);
        }
        proposal[static_cast<size_t>(i - begin)] = best;
        candidates.emplace_back(conf, i);
      }
      model.arena().reset();
      // Commit the k most confident proposals (ties broken by position, leftmost first).
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      const int64_t commit = std::min<int64_t>(k[static_cast<size_t>(s)], static_cast<int64_t>(candidates.size()));
      for (int64_t c = 0; c < commit; ++c) {
        const int64_t i = candidates[static_cast<size_t>(c)].second;
        x[static_cast<size_t>(i)] = proposal[static_cast<size_t>(i - begin)];
      }
    }
  }
  return std::vector<int32_t>(x.begin() + P, x.end());
}

std::vector<int32_t> ar_generate(LanguageModel& model, const std::vector<int32_t>& prompt, const ARSampleOptions& opt) {
  MDLM_CHECK(!prompt.empty(), "autoregressive sampling needs a non-empty prompt");
  const int64_t V = model.config().vocab_size;
  const int64_t Vlim = opt.vocab_limit > 0 ? std::min<int64_t>(opt.vocab_limit, V) : V;
  std::vector<int32_t> x(prompt), out, positions;
  const CounterRng rng(opt.seed, RngPurpose::Sampling);
  for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
    Tensor lg = logits_of(model, x, positions);
    const float* row = lg.data<float>() + (static_cast<int64_t>(x.size()) - 1) * V;
    int32_t next = 0;
    if (opt.temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(row, row + Vlim) - row);
    } else {
      std::vector<std::pair<float, int32_t>> cand(static_cast<size_t>(Vlim));
      for (int64_t v = 0; v < Vlim; ++v) cand[static_cast<size_t>(v)] = {row[v] / opt.temperature, static_cast<int32_t>(v)};
      std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      size_t keep = cand.size();
      if (opt.top_k > 0) keep = std::min(keep, static_cast<size_t>(opt.top_k));
      std::vector<double> p(keep);
      double z = 0;
      for (size_t i = 0; i < keep; ++i) z += p[i] = std::exp(static_cast<double>(cand[i].first - cand[0].first));
      if (opt.top_p < 1.0f) {
        double acc = 0;
        size_t cut = keep;
        for (size_t i = 0; i < keep; ++i) {
          acc += p[i] / z;
          if (acc >= opt.top_p) {
            cut = i + 1;
            break;
          }
        }
        keep = cut;
        z = 0;
        for (size_t i = 0; i < keep; ++i) z += p[i];
      }
      const double u = rng.uniform_double(static_cast<uint64_t>(n), 0) * z;
      double acc = 0;
      next = cand[keep - 1].second;
      for (size_t i = 0; i < keep; ++i) {
        acc += p[i];
        if (u < acc) {
          next = cand[i].second;
          break;
        }
      }
    }
    model.arena().reset();
    if (next == opt.eod) break;
    x.push_back(next);
    out.push_back(next);
    if (static_cast<int64_t>(x.size()) >= model.config().max_position_embeddings) break;
  }
  return out;
}

}  // namespace megadlm
