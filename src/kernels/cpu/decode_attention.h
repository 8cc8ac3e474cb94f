#pragma once
// Attention of new query rows against a key/value cache: the inference-only path behind the
// autoregressive KV cache and the diffusion prefix cache. No log-sum-exp is saved (no backward).
// Legend: B batch, Tn new rows per sequence, S cache capacity (rows per sequence), H query heads,
// K kv heads (H % K == 0), D head dim.
#include <cstdint>

namespace megadlm::cpu {

// q [B, Tn, H, D]; k_cache, v_cache [B, S, K, D] already holding the new rows' keys and values;
// offsets [B]: the cache row of each sequence's first new query. Query i of sequence b sits at row
// r = offsets[b] + i and sees cache rows [0, r] (causal) or [0, offsets[b] + Tn) (full, bidirectional).
// out [B, Tn, H, D] written. Every (b, i, h) is computed by one task, so the result does not depend
// on the number of threads.
void decode_attention_forward(float* out, const float* q, const float* k_cache, const float* v_cache,
                              const int64_t* offsets, int64_t B, int64_t Tn, int64_t S, int64_t H, int64_t K,
                              int64_t D, bool causal, float scale);

}  // namespace megadlm::cpu
