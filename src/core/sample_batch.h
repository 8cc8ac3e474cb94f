#pragma once
// What the loader hands an objective: B consecutive samples of this rank's share of the global sample
// stream, each T+1 token ids (Megatron's GPTDataset convention: the extra id is the last position's
// next token).
#include <cstdint>
#include <vector>

namespace megadlm {

struct SampleBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;  // [B, T+1] row-major
  // Supervised fine-tuning (--sft): 1 where the token is a response token (it carries loss), 0 where
  // it is prompt. Empty for pretraining data.
  std::vector<uint8_t> loss_mask;  // [B, T+1] or empty
  uint64_t first_sample = 0;    // global index of row 0; row b is sample first_sample + b
};

}  // namespace megadlm
