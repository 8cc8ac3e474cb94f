#pragma once
// Row permutations between tokens and expert-grouped rows (the layout of nn/moe/moe_router.h's MoERouting),
// also the output layer's gather of the rows that carry a loss. The CPU versions of
// kernels/cuda/ops.h's moe_permute / moe_unpermute / moe_unpermute_weight_grad, the same contracts.
// Deterministic: every sum runs in the listed order. Threaded over rows.
// Legend: N tokens, P permuted rows, C row width.
#include <cstdint>

namespace megadlm::cpu {

// rows [P, C] = x[token[p]] (* weight[p] when weight is not null); a row with token[p] < 0 (padding) = 0.
void moe_permute(float* rows, const float* x, const int32_t* token, const float* weight, int64_t P, int64_t C);

// out [N, C] written: out[n] = sum over the rows p listed for n of (weight[p] or 1) * rows[p], in the
// order listed (fp32, from 0). The index is CSR: list[offsets[n] .. offsets[n+1]) are the rows of token n;
// a token with none gets 0.
void moe_unpermute(float* out, const float* rows, const int32_t* offsets, const int32_t* list, const float* weight,
                   int64_t N, int64_t C);

// dweight [P] written: dot(dout[token[p]], rows[p]) summed in double (0 for padding): the weight
// gradient of a weighted moe_unpermute. Its input gradient is moe_permute of dout with the same weights.
void moe_unpermute_weight_grad(float* dweight, const float* dout, const float* rows, const int32_t* token, int64_t P,
                               int64_t C);

}  // namespace megadlm::cpu
