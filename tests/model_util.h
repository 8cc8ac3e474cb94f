#pragma once
// Helpers for tests that run a LanguageModel directly.
#include <numeric>
#include <vector>

#include "models/language_model.h"

namespace megadlm::test {

// Logits [T, V] of one sequence at positions 0..T-1, copied out of the model's arena.
inline std::vector<float> sequence_logits(LanguageModel& m, const std::vector<int32_t>& seq) {
  std::vector<int32_t> pos(seq.size());
  std::iota(pos.begin(), pos.end(), 0);
  MicroBatch mb;
  mb.B = 1;
  mb.T = static_cast<int64_t>(seq.size());
  mb.tokens = seq;
  mb.positions = pos;
  const Tensor lg = m.forward_logits(mb);
  std::vector<float> out(lg.data<float>(), lg.data<float>() + lg.numel());
  m.arena().reset();
  return out;
}

}  // namespace megadlm::test
