#include "infer/block_sampling.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "infer/denoise_step.h"

namespace megadlm {

namespace {

const char* mask_type_name(MaskType m) {
  if (m == MaskType::None) return "no_mask";
  if (m == MaskType::Causal) return "causal";
  if (m == MaskType::BlockCausal) return "block_causal";
  return "another mask";
}

// The canvas of a batch: B sequences of E positions, blocks of L; the prompt fills [0, P), the
// blocks [first, last) are generated.
struct Canvas {
  int64_t B = 0, L = 0, P = 0, E = 0, first = 0, last = 0;
  std::vector<int32_t> x;  // [B, E]
  int32_t* seq(int64_t b) { return x.data() + b * E; }
};

Canvas make_canvas(const LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                   const BlockSampleOptions& opt) {
  Canvas c;
  c.B = static_cast<int64_t>(prompts.size());
  c.L = opt.block_length;
  c.P = static_cast<int64_t>(prompts[0].size());
  for (const auto& p : prompts)
    MEGADLM_CHECK(static_cast<int64_t>(p.size()) == c.P, "a block-diffusion batch needs prompts of one length: got ",
                  p.size(), " and ", c.P, " tokens");
  const int64_t maxpos = model.config().max_position_embeddings;
  MEGADLM_CHECK(c.P <= maxpos, "the prompt of ", c.P, " tokens is longer than the model's --max-position-embeddings ",
                maxpos);
  // Blocks covering P + max_new_tokens (max_new_tokens capped by the positions, so no overflow).
  const int64_t wanted = (c.P + std::min(opt.max_new_tokens, maxpos) + c.L - 1) / c.L;
  c.last = std::min(wanted, maxpos / c.L);
  c.first = c.P / c.L;
  c.E = std::max(c.last, c.first) * c.L;
  c.x.assign(static_cast<size_t>(c.B * c.E), opt.mask_token);
  for (int64_t b = 0; b < c.B; ++b)
    std::copy(prompts[b].begin(), prompts[b].begin() + std::min(c.P, c.E), c.x.begin() + b * c.E);
  return c;
}

// Runs block `blk` of every canvas (rows [blk L, (blk + 1) L)) through the model against the
// cached rows [0, blk L), which must hold the committed blocks before it; the block's keys/values
// go to its own rows. Logits [B L, V] (or [B, V] when last_only), valid until the arena is reset.
Tensor run_block(LanguageModel& model, KVCache& cache, Canvas& c, int64_t blk, bool last_only,
                 DiffusionStats* stats) {
  const int64_t L = c.L, row0 = blk * L;
  std::vector<int32_t> tokens(static_cast<size_t>(c.B * L)), positions(tokens.size());
  for (int64_t b = 0; b < c.B; ++b) {
    std::copy(c.seq(b) + row0, c.seq(b) + row0 + L, tokens.begin() + b * L);
    std::iota(positions.begin() + b * L, positions.begin() + (b + 1) * L, static_cast<int32_t>(row0));
  }
  const std::vector<int64_t> offsets(static_cast<size_t>(c.B), row0);
  MicroBatch mb;
  mb.B = c.B;
  mb.T = L;
  mb.tokens = tokens;
  mb.positions = positions;
  if (stats) stats->rows_computed += c.B * L;
  return model.forward_logits_cached(mb, cache, 0, offsets.data(), /*causal=*/false, last_only);
}

// Writes the keys/values of the committed blocks [from, to) into the cache, one block per call.
void commit_blocks(LanguageModel& model, KVCache& cache, Canvas& c, int64_t from, int64_t to, DiffusionStats* stats) {
  for (int64_t j = from; j < to; ++j) {
    run_block(model, cache, c, j, /*last_only=*/true, stats);
    model.arena().reset();
  }
}

// The first position of sequence b's generated tokens [P, min(P + max_new, E)) holding eod, or -1.
int64_t first_eod(Canvas& c, int64_t b, int64_t from, int64_t to, int32_t eod) {
  if (eod < 0) return -1;
  for (int64_t i = from; i < to; ++i)
    if (c.seq(b)[i] == eod) return i;
  return -1;
}

}  // namespace

void check_block_diffusion_model(const TransformerConfig& cfg, int64_t block_length, const std::string& source) {
  MEGADLM_CHECK(cfg.attention_mask == MaskType::BlockCausal,
                "--sampler bd3 needs a block-diffusion model (attention mask block_causal); ", source,
                " has attention mask ", mask_type_name(cfg.attention_mask));
  MEGADLM_CHECK(block_length == cfg.attention_block_size, "--block-length ", block_length,
                " does not match the block size ", cfg.attention_block_size, " of ", source,
                " (its attention_block_size)");
  MEGADLM_CHECK(block_length >= 1, "--block-length must be positive, got ", block_length, " (", source, ")");
}

std::vector<std::vector<int32_t>> block_diffusion_generate(LanguageModel& model,
                                                           const std::vector<std::vector<int32_t>>& prompts,
                                                           const BlockSampleOptions& opt) {
  check_block_diffusion_model(model.config(), opt.block_length, "the model");
  MEGADLM_CHECK(opt.mask_token >= 0, "block diffusion sampling needs the model's mask token");
  MEGADLM_CHECK(!prompts.empty(), "block diffusion sampling needs at least one prompt");
  MEGADLM_CHECK(opt.max_new_tokens >= 0, "--max-new-tokens must be non-negative, got ", opt.max_new_tokens);
  const bool thresholded = opt.threshold > 0;
  MEGADLM_CHECK(!(thresholded && opt.rule == DiffusionSampler::MDLM),
                "--threshold needs --commit-rule llada (MDLM reveals tokens at random)");
  MEGADLM_CHECK(opt.threshold < 1.0f, "--threshold must be below 1, got ", opt.threshold);
  MEGADLM_CHECK(thresholded || opt.steps >= 1, "--steps must be positive, got ", opt.steps);
  const int64_t B = static_cast<int64_t>(prompts.size());
  MEGADLM_CHECK(opt.seeds.empty() || static_cast<int64_t>(opt.seeds.size()) == B, "sampling: ", opt.seeds.size(),
                " seeds for ", B, " prompts");
  Canvas c = make_canvas(model, prompts, opt);
  const int64_t L = c.L, V = model.config().vocab_size;
  // Generated tokens: [P, gen_end).
  const int64_t gen_end = c.E - c.P > opt.max_new_tokens ? c.P + opt.max_new_tokens : c.E;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  if (gen_end <= c.P) return out;

  std::vector<CounterRng> rngs;
  for (int64_t b = 0; b < B; ++b)
    rngs.emplace_back(opt.seeds.empty() ? opt.seed + static_cast<uint64_t>(b) : opt.seeds[static_cast<size_t>(b)],
                      RngPurpose::Sampling);
  DenoiseRule rule;
  rule.sampler = opt.rule;
  rule.remasking = opt.remasking;
  rule.temperature = opt.temperature;
  rule.threshold = opt.threshold;
  rule.mask_token = opt.mask_token;
  rule.vocab = V;
  rule.vocab_limit = opt.vocab_limit > 0 ? std::min<int64_t>(opt.vocab_limit, V) : V;
  const int64_t steps = thresholded ? L : opt.steps;
  KVCache own;
  KVCache& cache = opt.cache ? *opt.cache : own;
  model.allocate_cache(cache, B, c.E);
  if (opt.kv_cache) commit_blocks(model, cache, c, 0, c.first, opt.stats);

  std::vector<int64_t> end_of(static_cast<size_t>(B), gen_end);  // where each sequence's output ends
  std::vector<char> done(static_cast<size_t>(B), 0);
  std::vector<float> work;
  for (int64_t blk = c.first; blk < c.last; ++blk) {
    const int64_t begin = blk * L, end = begin + L;
    const std::vector<int64_t> k = tokens_per_step(end - std::max(begin, c.P), steps);
    for (int64_t s = 0; s < steps; ++s) {
      bool any_masked = false;
      for (int64_t b = 0; b < B; ++b)
        if (!done[b]) any_masked |= std::find(c.seq(b) + begin, c.seq(b) + end, opt.mask_token) != c.seq(b) + end;
      if (!any_masked) break;  // the block is complete (LLaDA's schedule or threshold decoding)
      if (!opt.kv_cache) commit_blocks(model, cache, c, 0, blk, opt.stats);  // from scratch
      const Tensor lg = run_block(model, cache, c, blk, /*last_only=*/false, opt.stats);
      if (opt.stats) ++opt.stats->steps;
      DenoiseStep st;
      st.begin = begin;
      st.end = end;
      st.step = s;
      st.steps = steps;
      st.scheduled = k[static_cast<size_t>(s)];
      // The draws are keyed by (block, step), not by a count of the calls made: a block that ends
      // early (every sequence of the batch complete) leaves the later blocks' draws unchanged.
      st.counter = static_cast<uint64_t>(blk * steps + s);
      for (int64_t b = 0; b < B; ++b) {
        if (done[b]) continue;
        DiffusionStepTrace tr;
        if (!denoise_block_step(rule, st, lg.data<float>() + b * L * V, nullptr, c.seq(b), rngs[static_cast<size_t>(b)],
                                work, tr))
          continue;
        tr.seq = b;
        tr.block = blk;
        tr.step = s;
        if (opt.trace) opt.trace->push_back(std::move(tr));
      }
      model.arena().reset();
    }
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const int64_t e = first_eod(c, b, std::max(begin, c.P), std::min(end, gen_end), opt.eod);
      if (e >= 0) {
        end_of[static_cast<size_t>(b)] = e;
        done[b] = 1;
      }
      all_done &= done[b] != 0;
    }
    if (all_done || blk + 1 == c.last) break;
    if (opt.kv_cache) commit_blocks(model, cache, c, blk, blk + 1, opt.stats);
  }
  for (int64_t b = 0; b < B; ++b) out[b].assign(c.seq(b) + c.P, c.seq(b) + end_of[static_cast<size_t>(b)]);
  return out;
}

}  // namespace megadlm
