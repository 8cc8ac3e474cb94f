#pragma once
// Fused softmax cross-entropy over the vocabulary, loss and gradient in one pass over the logits.
// Legend: N tokens, V vocabulary (padded).
#include <cstdint>

namespace megadlm::cpu {

// For each row n with targets[n] != ignore_index:
//   losses[n]   = w_n * (logsumexp(logits[n]) - logits[n][targets[n]])
//   dlogits[n]  = grad_scale * w_n * (softmax(logits[n]) - onehot(targets[n]))
// with w_n = weights[n] (or 1 when weights is null). Ignored rows get loss 0 and zero gradient.
// dlogits may alias logits (in place, saving V*N floats); dlogits may be null (forward only).
// Returns the sum of losses, accumulated in double in a fixed order (thread-count independent).
double cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                      const float* weights, int64_t ignore_index, float grad_scale, int64_t N,
                                      int64_t V);

// The same with the gradient written in bf16 (what the output layer's bf16 products take):
// dlogits_bf16 [N, V] receives the bits f32_to_bf16 gives the fp32 gradient above, and no fp32 [N, V]
// gradient is written. losses may be null.
double cross_entropy_forward_backward_bf16(float* losses, uint16_t* dlogits_bf16, const float* logits,
                                           const int32_t* targets, const float* weights, int64_t ignore_index,
                                           float grad_scale, int64_t N, int64_t V);

// Vocab-parallel pieces (tensor parallelism; nn/vocab_parallel_cross_entropy.h reduces between them):
// logits [N, Vl] are columns [vocab_start, vocab_start + Vl) of rows of the full vocabulary.
// (1) row_max[n] = max of the shard's logits of row n (0 for ignored rows).
void cross_entropy_shard_max(float* row_max, const float* logits, const int32_t* targets, int64_t ignore_index,
                             int64_t N, int64_t Vl);
// (2) With the max over all shards: stats[2n] = sum of exp(x - row_max[n]) over the shard and
// stats[2n+1] = the target's logit when this shard holds it, else 0. e [N, Vl] (or null; may alias
// logits) receives exp(x - row_max), zeros for ignored rows.
void cross_entropy_shard_sumexp(double* stats, float* e, const float* logits, const float* row_max,
                                const int32_t* targets, int64_t ignore_index, int64_t vocab_start, int64_t N,
                                int64_t Vl);
// (3) With stats summed over the shards: losses[n] = w_n (row_max + log(sum) - target logit) (or
// null), and, when dlogits is not null (it holds e from (2)), dlogits = grad_scale w_n (e / sum -
// onehot) on the shard; with dlogits_bf16 [N, Vl] that gradient goes there in bf16 instead and dlogits
// keeps e. Returns the sum of losses over rows 0..N-1 in double.
double cross_entropy_shard_finish(float* losses, float* dlogits, const double* stats, const float* row_max,
                                  const int32_t* targets, const float* weights, int64_t ignore_index,
                                  float grad_scale, int64_t vocab_start, int64_t N, int64_t Vl,
                                  uint16_t* dlogits_bf16 = nullptr);

// ---- bf16 logits (the output layer under --bf16, as Megatron's) ----
// The single-rank kernel on bf16 logits [N, V]: the sums and the gradient are computed in fp32 from the
// bf16 values, and the gradient is written in bf16; dlogits [N, V] may alias logits (in place).
double cross_entropy_forward_backward_bf16(float* losses, uint16_t* dlogits, const uint16_t* logits,
                                           const int32_t* targets, const float* weights, int64_t ignore_index,
                                           float grad_scale, int64_t N, int64_t V);
// The vocab-parallel pieces on bf16 logits: (1) and (2) as above without the exponentials' buffer; (3)
// recomputes them from the logits and writes the bf16 gradient to dlogits [N, Vl] (or null; may alias
// logits).
void cross_entropy_shard_max(float* row_max, const uint16_t* logits, const int32_t* targets, int64_t ignore_index,
                             int64_t N, int64_t Vl);
void cross_entropy_shard_sumexp(double* stats, const uint16_t* logits, const float* row_max, const int32_t* targets,
                                int64_t ignore_index, int64_t vocab_start, int64_t N, int64_t Vl);
double cross_entropy_shard_finish(float* losses, uint16_t* dlogits, const uint16_t* logits, const double* stats,
                                  const float* row_max, const int32_t* targets, const float* weights,
                                  int64_t ignore_index, float grad_scale, int64_t vocab_start, int64_t N,
                                  int64_t Vl);

}  // namespace megadlm::cpu
