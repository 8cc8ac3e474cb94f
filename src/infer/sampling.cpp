#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "infer/denoise_step.h"
#include "infer/likelihood.h"

namespace megadlm {

Remasking remasking_from_name(const std::string& name) {
  if (name == "low_confidence") return Remasking::LowConfidence;
  if (name == "random") return Remasking::Random;
  fail("--remasking: unknown value '", name, "' (expected low_confidence or random)");
}

DiffusionSampler diffusion_sampler_from_name(const std::string& name) {
  if (name == "llada") return DiffusionSampler::LLaDA;
  if (name == "mdlm") return DiffusionSampler::MDLM;
  fail("--sampler: unknown value '", name, "' (expected llada or mdlm)");
}

std::vector<int64_t> tokens_per_step(int64_t masked, int64_t steps) {
  std::vector<int64_t> k(static_cast<size_t>(steps), masked / steps);
  for (int64_t i = 0; i < masked % steps; ++i) ++k[static_cast<size_t>(i)];
  return k;
}

std::vector<CounterRng> sequence_rngs(uint64_t seed, const std::vector<uint64_t>& seeds, int64_t B) {
  MEGADLM_CHECK(seeds.empty() || static_cast<int64_t>(seeds.size()) == B, "sampling: ", seeds.size(), " seeds for ", B,
                " prompts");
  std::vector<CounterRng> rngs;
  for (int64_t b = 0; b < B; ++b)
    rngs.emplace_back(seeds.empty() ? seed + static_cast<uint64_t>(b) : seeds[static_cast<size_t>(b)],
                      RngPurpose::Sampling);
  return rngs;
}

namespace {

void check_length(const LanguageModel& model, int64_t T) {
  MEGADLM_CHECK(T <= model.config().max_position_embeddings, "the sequence of ", T,
                " tokens is longer than the model's --max-position-embeddings ", model.config().max_position_embeddings);
}

// Runs the model on R sequences of T tokens each, seq [R*T], and returns logits [R*T, V] (valid until
// the arena is reset). inputs (or empty): the rows hold prompts [first, first + count) of the batch.
Tensor logits_of(LanguageModel& model, const std::vector<int32_t>& seq, int64_t R, std::vector<int32_t>& positions,
                 const PromptInputs& inputs, int64_t first, int64_t count) {
  const int64_t T = static_cast<int64_t>(seq.size()) / R;
  check_length(model, T);
  positions.resize(seq.size());
  for (int64_t r = 0; r < R; ++r)
    std::iota(positions.begin() + r * T, positions.begin() + (r + 1) * T, 0);
  MicroBatch mb;
  mb.B = R;
  mb.T = T;
  mb.tokens = seq;
  mb.positions = positions;
  if (inputs) inputs(first, count, mb);
  return model.forward_logits(mb);
}

}  // namespace

std::vector<int32_t> diffusion_generate(LanguageModel& model, const std::vector<int32_t>& prompt,
                                        const DiffusionSampleOptions& opt) {
  return diffusion_generate_batch(model, {prompt}, opt)[0];
}

std::vector<std::vector<int32_t>> diffusion_generate_batch(LanguageModel& model,
                                                           const std::vector<std::vector<int32_t>>& prompts,
                                                           const DiffusionSampleOptions& opt) {
  MEGADLM_CHECK(opt.mask_token >= 0, "diffusion sampling needs the model's mask token");
  MEGADLM_CHECK(opt.gen_length >= 1, "--gen-length must be positive");
  MEGADLM_CHECK(opt.block_length >= 1 && opt.gen_length % opt.block_length == 0, "--gen-length ", opt.gen_length,
                " is not a multiple of --block-length ", opt.block_length);
  MEGADLM_CHECK(!prompts.empty(), "diffusion sampling needs at least one prompt");
  const int64_t num_blocks = opt.gen_length / opt.block_length;
  const bool thresholded = opt.threshold > 0;
  MEGADLM_CHECK(!(thresholded && opt.sampler == DiffusionSampler::MDLM),
                "--threshold and --sampler mdlm do not combine (MDLM reveals tokens at random)");
  MEGADLM_CHECK(opt.threshold < 1.0f, "--threshold must be below 1, got ", opt.threshold);
  MEGADLM_CHECK(opt.cfg_scale >= 0, "--cfg-scale must be non-negative, got ", opt.cfg_scale);
  if (!thresholded)
    MEGADLM_CHECK(opt.steps >= num_blocks && opt.steps % num_blocks == 0, "--steps ", opt.steps,
                  " is not a multiple of the number of blocks ", num_blocks);
  const int64_t steps_per_block = thresholded ? opt.block_length : opt.steps / num_blocks;
  const int64_t V = model.config().vocab_size;
  const int64_t Vlim = opt.vocab_limit > 0 ? std::min<int64_t>(opt.vocab_limit, V) : V;
  const int64_t B = static_cast<int64_t>(prompts.size());
  const int64_t P = static_cast<int64_t>(prompts[0].size());
  for (const auto& p : prompts)
    MEGADLM_CHECK(static_cast<int64_t>(p.size()) == P, "a diffusion batch needs prompts of one length: got ", p.size(),
                  " and ", P, " tokens");
  const int64_t T = P + opt.gen_length;
  check_length(model, T);
  const bool cfg = opt.cfg_scale > 0;
  const int64_t R = cfg ? 2 * B : B;  // rows: B conditional canvases, then B unconditional ones
  const int32_t M = opt.mask_token;
  std::vector<int32_t> x(static_cast<size_t>(R * T), M);
  for (int64_t b = 0; b < B; ++b) std::copy(prompts[b].begin(), prompts[b].end(), x.begin() + b * T);
  const std::vector<CounterRng> rngs = sequence_rngs(opt.seed, opt.seeds, B);
  std::vector<int32_t> positions, window;
  KVCache cache;
  if (opt.prefix_cache) model.allocate_cache(cache, R, T);
  std::vector<int64_t> offsets(static_cast<size_t>(R));
  std::vector<float> comb(static_cast<size_t>(Vlim));
  DenoiseRule rule;
  rule.sampler = opt.sampler;
  rule.remasking = opt.remasking;
  rule.temperature = opt.temperature;
  rule.threshold = opt.threshold;
  rule.cfg_scale = opt.cfg_scale;
  rule.mask_token = M;
  rule.vocab = V;
  rule.vocab_limit = Vlim;
  uint64_t step_counter = 0;

  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t begin = P + blk * opt.block_length, end = begin + opt.block_length;
    const std::vector<int64_t> k = tokens_per_step(opt.block_length, steps_per_block);
    for (int64_t s = 0; s < steps_per_block; ++s, ++step_counter) {
      bool any_masked = false;
      for (int64_t b = 0; b < B && !any_masked; ++b)
        for (int64_t i = begin; i < end; ++i) any_masked |= x[static_cast<size_t>(b * T + i)] == M;
      if (!any_masked) break;  // threshold decoding finished the block early
      // The model call: the whole canvas, or with the prefix cache after the block's first step only
      // the rows from the block on.
      const int64_t w0 = (opt.prefix_cache && s > 0) ? begin : 0, Tw = T - w0;
      Tensor lg;
      if (!opt.prefix_cache) {
        lg = logits_of(model, x, R, positions, opt.inputs, 0, B);
      } else {
        window.resize(static_cast<size_t>(R * Tw));
        positions.resize(static_cast<size_t>(R * Tw));
        for (int64_t r = 0; r < R; ++r) {
          std::copy(x.begin() + r * T + w0, x.begin() + (r + 1) * T, window.begin() + r * Tw);
          std::iota(positions.begin() + r * Tw, positions.begin() + (r + 1) * Tw, static_cast<int32_t>(w0));
          offsets[static_cast<size_t>(r)] = w0;
        }
        MicroBatch mb;
        mb.B = R;
        mb.T = Tw;
        mb.tokens = window;
        mb.positions = positions;
        if (w0 == 0 && opt.inputs) opt.inputs(0, B, mb);
        lg = model.forward_logits_cached(mb, cache, 0, offsets.data(), /*causal=*/false, /*last_only=*/false);
      }
      if (opt.stats) {
        ++opt.stats->steps;
        opt.stats->rows_computed += R * Tw;
      }
      const float* logits = lg.data<float>();
      DenoiseStep st;
      st.begin = begin;
      st.end = end;
      st.step = s;
      st.steps = steps_per_block;
      st.scheduled = k[static_cast<size_t>(s)];
      st.counter = step_counter;
      for (int64_t b = 0; b < B; ++b) {
        const float* rows = logits + (b * Tw + begin - w0) * V;  // [block_length, V]
        const float* un = cfg ? logits + ((B + b) * Tw + begin - w0) * V : nullptr;
        DiffusionStepTrace tr;
        if (!denoise_block_step(rule, st, rows, un, x.data() + b * T, rngs[static_cast<size_t>(b)], comb, tr)) continue;
        // The unconditional canvas takes the same commits (its block was masked where this one was).
        if (cfg) std::copy(x.begin() + b * T + begin, x.begin() + b * T + end, x.begin() + (B + b) * T + begin);
        tr.seq = b;
        tr.block = blk;
        tr.step = s;
        if (opt.trace) opt.trace->push_back(std::move(tr));
      }
      model.arena().reset();
    }
  }
  std::vector<std::vector<int32_t>> out;
  for (int64_t b = 0; b < B; ++b) out.emplace_back(x.begin() + b * T + P, x.begin() + (b + 1) * T);
  return out;
}

int32_t ar_next_token(const float* row, int64_t Vlim, const ARSampleOptions& opt, const CounterRng& rng, int64_t n) {
  if (opt.temperature <= 0) return static_cast<int32_t>(std::max_element(row, row + Vlim) - row);
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
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return cand[i].second;
  }
  return cand[keep - 1].second;
}

std::vector<int32_t> ar_generate(LanguageModel& model, const std::vector<int32_t>& prompt, const ARSampleOptions& opt) {
  return ar_generate_batch(model, {prompt}, opt)[0];
}

std::vector<std::vector<int32_t>> ar_generate_batch(LanguageModel& model,
                                                    const std::vector<std::vector<int32_t>>& prompts,
                                                    const ARSampleOptions& opt) {
  const int64_t V = model.config().vocab_size;
  const int64_t Vlim = opt.vocab_limit > 0 ? std::min<int64_t>(opt.vocab_limit, V) : V;
  const int64_t maxpos = model.config().max_position_embeddings;
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t longest = 0;
  for (const auto& p : prompts) {
    MEGADLM_CHECK(!p.empty(), "autoregressive sampling needs a non-empty prompt");
    check_length(model, static_cast<int64_t>(p.size()));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  const std::vector<CounterRng> rngs = sequence_rngs(opt.seed, opt.seeds, B);
  // A sequence is done at eod, at max_new_tokens, or when the next token would not have a position.
  auto wants_more = [&](int64_t b, int32_t last) {
    const int64_t len = static_cast<int64_t>(prompts[b].size() + out[b].size());
    return last != opt.eod && static_cast<int64_t>(out[b].size()) < opt.max_new_tokens && len < maxpos;
  };

  if (!opt.kv_cache) {
    std::vector<int32_t> positions;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int32_t> x(prompts[b]);
      for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
        Tensor lg = logits_of(model, x, 1, positions, opt.inputs, b, 1);
        const int32_t next = ar_next_token(lg.data<float>() + (static_cast<int64_t>(x.size()) - 1) * V, Vlim, opt,
                                       rngs[static_cast<size_t>(b)], n);
        model.arena().reset();
        if (next == opt.eod) break;
        x.push_back(next);
        out[b].push_back(next);
        if (static_cast<int64_t>(x.size()) >= maxpos) break;
      }
    }
    return out;
  }

  if (opt.max_new_tokens <= 0) return out;
  const int64_t S = std::min<int64_t>(maxpos, longest + opt.max_new_tokens);
  KVCache cache;
  model.allocate_cache(cache, B, S);
  std::vector<int64_t> len(static_cast<size_t>(B));
  std::vector<char> done(static_cast<size_t>(B), 0);
  std::vector<int32_t> positions;
  // Prefill: each prompt on its own (lengths differ), keeping only its last row's logits.
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[b];
    const int64_t T = static_cast<int64_t>(p.size());
    positions.resize(static_cast<size_t>(T));
    std::iota(positions.begin(), positions.end(), 0);
    MicroBatch mb;
    mb.B = 1;
    mb.T = T;
    mb.tokens = p;
    mb.positions = positions;
    if (opt.inputs) opt.inputs(b, 1, mb);
    const int64_t zero = 0;
    Tensor lg = model.forward_logits_cached(mb, cache, b, &zero, /*causal=*/true, /*last_only=*/true);
    const int32_t next = ar_next_token(lg.data<float>(), Vlim, opt, rngs[static_cast<size_t>(b)], 0);
    model.arena().reset();
    len[b] = T;
    if (next == opt.eod) {
      done[b] = 1;
      continue;
    }
    out[b].push_back(next);
    done[b] = !wants_more(b, next);
  }
  // Decode: one new row per sequence per step, all sequences together. Finished sequences still run
  // (their rows are ignored) so the batch stays contiguous.
  std::vector<int32_t> tok(static_cast<size_t>(B)), pos(static_cast<size_t>(B));
  std::vector<int64_t> offs(static_cast<size_t>(B));
  while (true) {
    bool any = false;
    for (int64_t b = 0; b < B; ++b) any |= !done[b];
    if (!any) break;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = std::min<int64_t>(len[b], S - 1);
      tok[b] = out[b].empty() ? prompts[b].back() : out[b].back();
      pos[b] = static_cast<int32_t>(row);
      offs[b] = row;
    }
    MicroBatch mb;
    mb.B = B;
    mb.T = 1;
    mb.tokens = tok;
    mb.positions = pos;
    Tensor lg = model.forward_logits_cached(mb, cache, 0, offs.data(), /*causal=*/true, /*last_only=*/true);
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      ++len[b];
      const int32_t next = ar_next_token(lg.data<float>() + b * V, Vlim, opt, rngs[static_cast<size_t>(b)],
                                     static_cast<int64_t>(out[b].size()));
      if (next == opt.eod) {
        done[b] = 1;
        continue;
      }
      out[b].push_back(next);
      done[b] = !wants_more(b, next);
    }
    model.arena().reset();
  }
  return out;
}

}  // namespace megadlm
