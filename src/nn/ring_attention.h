#pragma once
// Context parallelism's attention (--context-parallel-size cp): ring attention over Megatron's
// load-balanced split of every sequence.
//
// The split: a sequence of S tokens is cut into 2cp chunks of c = S / (2cp) tokens; cp rank r holds
// chunks r and 2cp-1-r, in that order, as its T = 2c local rows (models/context_parallel.h makes the
// micro-batch). Under a causal mask every rank then has the same work: an early chunk and a late one.
//
// The ring: each rank keeps its queries and passes its keys and values round the cp group (to rank
// r+1, from rank r-1), cp steps in all. At step s a rank holds the keys and values of owner
// (r - s) mod cp; the exchange for step s+1 is posted before step s computes, so it overlaps the
// compute. Each pair (query chunk, key chunk) is one call of the backend's attention kernel on c x c:
//   - the same chunk: the model's mask (causal, block-causal with c a multiple of the block, or none);
//   - a key chunk earlier than the query chunk: every key visible;
//   - a later key chunk: skipped under a causal or block-causal mask, every key visible otherwise;
// documents (per-document masks) by the chunks' own segment ids, queries' and keys' apart
// (AttentionMask::key_segment_ids). The partial outputs are merged by their log-sum-exps, so the
// result is the attention of the whole sequence.
//
// Backward (flash-attention's, per chunk pair, with the merged output and log-sum-exp): dq stays
// local; dk and dv are accumulated into buffers that travel round the ring behind the keys and
// values and, one exchange after the last step, arrive at their owner.
//
// The tensors live on the arena's device; the exchange is the cp group's Communicator::send_recv_async
// for that device (MPI on the CPU, NCCL's grouped send and receive on a GPU, on its own stream).
// Legend: B batch, T = 2c local rows, H query heads, K kv heads, D head dim.
#include <cstdint>

#include "core/arena.h"
#include "kernels/backend.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// The chunk (0 .. 2cp-1) of the sequence that cp rank `rank` holds as its half `half` (0 or 1).
inline int64_t context_chunk(int cp, int rank, int half) { return half == 0 ? rank : 2 * cp - 1 - rank; }

struct RingAttentionArgs {
  int64_t B = 0, T = 0, H = 0, K = 0, D = 0;  // T: local rows per sequence (2c)
  MaskType mask = MaskType::Causal;
  int64_t block_size = 0;                      // BlockCausal
  const int32_t* sequence_segments = nullptr;  // [B, 2cp*c] the whole sequences' document ids (host), or null
  float scale = 1.0f;
};

// q [B,T,H,D], k, v [B,T,K,D] (this rank's rows) -> out [B,T,H,D], lse [B,H,T] of the whole sequence's
// attention. Temporaries from `arena`, released before returning. Collective over ctx.cp.
void ring_attention_forward(Arena& arena, const ParallelContext& ctx, const RingAttentionArgs& a, float* out,
                            float* lse, const float* q, const float* k, const float* v);

// dout [B,T,H,D] -> dq [B,T,H,D], dk, dv [B,T,K,D] written. out and lse are the forward's. Collective.
void ring_attention_backward(Arena& arena, const ParallelContext& ctx, const RingAttentionArgs& a, float* dq,
                             float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                             const float* out, const float* lse);

}  // namespace megadlm
