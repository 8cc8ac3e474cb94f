#include "infer/t5_generation.h"

#include <algorithm>

#include "core/error.h"

namespace megadlm {

namespace {

// The prompts padded on the right to the longest, and their masks: the encoder's half of a T5Batch.
T5Batch encoder_batch(const std::vector<std::vector<int32_t>>& prompts, int32_t pad) {
  T5Batch b;
  b.B = static_cast<int64_t>(prompts.size());
  for (const auto& p : prompts) b.S = std::max<int64_t>(b.S, static_cast<int64_t>(p.size()));
  b.encoder_tokens.assign(static_cast<size_t>(b.B * b.S), pad);
  b.encoder_mask.assign(static_cast<size_t>(b.B * b.S), 0);
  for (int64_t i = 0; i < b.B; ++i) {
    const auto& p = prompts[static_cast<size_t>(i)];
    std::copy(p.begin(), p.end(), b.encoder_tokens.begin() + i * b.S);
    std::fill_n(b.encoder_mask.begin() + i * b.S, p.size(), 1);
  }
  return b;
}

}  // namespace

std::vector<std::vector<int32_t>> t5_generate_batch(T5Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                                    const T5GenerateOptions& opt) {
  const ARSampleOptions& so = opt.sampling;
  MEGADLM_CHECK(!prompts.empty(), "T5 generation: no prompts");
  for (size_t i = 0; i < prompts.size(); ++i)
    MEGADLM_CHECK(!prompts[i].empty(), "T5 generation: prompt ", i, " has no tokens (the encoder needs one at least)");
  MEGADLM_CHECK(so.max_new_tokens >= 1, "--max-new-tokens: ", so.max_new_tokens, " (T5 generates one token at least)");
  const int64_t V = model.config().vocab_size;
  const int64_t Vlim = so.vocab_limit > 0 ? std::min<int64_t>(so.vocab_limit, V) : V;
  T5Batch batch = encoder_batch(prompts, opt.pad);
  const int64_t B = batch.B;
  const std::vector<CounterRng> rngs = sequence_rngs(so.seed, so.seeds, B);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  std::vector<char> done(static_cast<size_t>(B), 0);
  // Each sequence's decoder inputs so far [B, n + 1]: the start id, then the chosen ids (pad once done).
  std::vector<std::vector<int32_t>> inputs(static_cast<size_t>(B), std::vector<int32_t>{opt.decoder_start});
  T5DecoderCache cache;
  if (so.kv_cache) model.start_generation(batch.encoder_tokens, batch.encoder_mask, B, batch.S, so.max_new_tokens, cache);
  for (int64_t n = 0; n < so.max_new_tokens; ++n) {
    Tensor lg;
    int64_t row = 0, rows = 1;  // the new row of sequence b: logits row b * rows + row
    if (so.kv_cache) {
      std::vector<int32_t> last(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) last[b] = inputs[b].back();
      lg = model.decode_step_logits(last, cache);
    } else {
      batch.T = rows = n + 1;
      row = n;
      batch.decoder_tokens.clear();
      for (const auto& in : inputs) batch.decoder_tokens.insert(batch.decoder_tokens.end(), in.begin(), in.end());
      lg = model.forward_logits(batch);
    }
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      int32_t next = opt.pad;
      if (!done[b]) {
        next = ar_next_token(lg.data<float>() + (b * rows + row) * V, Vlim, so, rngs[static_cast<size_t>(b)], n);
        if (next == so.eod) done[b] = 1;
        else out[b].push_back(next);
      }
      inputs[b].push_back(done[b] ? opt.pad : next);
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  return out;
}

}  // namespace megadlm
