#pragma once
// Token embedding (vocab-parallel ready) and learned absolute positions.
// Legend: N tokens (B*T), C hidden, V rows of this rank's vocabulary shard, P position rows.
#include <cstdint>

namespace megadlm::cpu {

// out [N,C] = wte[tokens[n] - vocab_start] for tokens in [vocab_start, vocab_start + V), else 0
// (the other tensor-parallel ranks supply those rows; a single rank has vocab_start = 0).
// When wpe is not null, out[n] += wpe[positions[n]]. Token and position ids must be validated by
// the caller.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t vocab_start, int64_t V,
                       const int32_t* positions, const float* wpe, int64_t N, int64_t C);
// dwte [V,C] and dwpe [P,C] accumulated (dwpe may be null); deterministic for any thread count.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t vocab_start,
                        int64_t V, const int32_t* positions, int64_t N, int64_t C);

}  // namespace megadlm::cpu
