#pragma once
// What T5's decoder keeps between the steps of generation (T5Stack::start_decoding, decode_step): the
// encoder's output and its padding, per decoder layer the cross-attention's keys and values of that
// output (made once per batch of prompts), and the self-attention's keys and values of the decoder rows
// so far (one row more a step). Owned host tensors; a rank holds its own heads' keys and values.
// Legend: B sequences, S encoder rows a sequence, R the decoder rows the cache has room for a sequence,
// C hidden, Hl this rank's heads, D head dim.
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megadlm {

struct T5DecoderCache {
  int64_t B = 0, S = 0, R = 0;
  int64_t length = 0;                    // decoder rows cached a sequence: the next step's position
  Tensor memory;                         // [B*S, C] the encoder's output
  std::vector<int32_t> memory_mask;      // [B*S] 1 token, 0 padding; empty: no padding
  std::vector<Tensor> cross_k, cross_v;  // per decoder layer [B*S, Hl*D]
  std::vector<Tensor> self_k, self_v;    // per decoder layer [B*R, Hl*D]: sequence b's row i at b*R + i
};

}  // namespace megadlm
