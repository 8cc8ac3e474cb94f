#pragma once
// The output layer: logits = x W^T with W the word embeddings (tied) or a separate output matrix,
// then the fused softmax cross-entropy with per-token weights, a chunk of rows at a time (forward,
// loss, both backward products per chunk). The logits buffer is reused in place for dlogits.
// Legend: N tokens, C hidden, V vocabulary, Vl this rank's vocabulary shard (balanced_rows(V, tp, rank),
// core/parameters.h: V/tp rows, one more on the first V % tp ranks).
//
// The padded vocabulary rows (from cfg.real_vocab_size up to V) get -inf logits wherever logits are
// made (training loss, full_logits for evaluation and sampling), so no softmax sees them.
//
// Tensor parallelism: the output matrix is split by vocabulary rows like the word embeddings (with
// tied embeddings the same shard serves both), each rank makes the logits of its shard [N, Vl] and the
// cross-entropy is vocab-parallel (nn/vocab_parallel_cross_entropy.h): the full logits are never
// gathered in training. The input gradient is a partial sum over the tp ranks, all-reduced (or
// reduce-scattered to this rank's rows under sequence parallelism, where x holds N/tp rows and is
// all-gathered first).
#include <vector>

#include "core/arena.h"
#include "kernels/backend.h"
#include "core/parameters.h"
#include "nn/precision.h"
#include "nn/transformer_config.h"
#include "parallel/parallel_context.h"

namespace megadlm {

// The logits are made and consumed a chunk of rows of [N, Vl] at a time, never all N rows at once: at
// a 50k vocabulary the full [N, V] block would be the largest activation of the step. A chunk holds
// 64 MiB of logits (env MEGADLM_LOGITS_CHUNK_MB overrides; each chunk reads the output matrix and its
// gradient once more) and at least 64 rows, which keeps the products efficient; at most N; the N rows
// are then split evenly over the chunks that takes (no short last chunk), in fewer chunks of up to
// twice the budget where an even split would fall under kMinChunkRows rows. A logit
// takes 4 bytes in fp32, 2 under the bf16 policy on the CPU (bf16 logits, dlogits in place) and 6 on a
// device under it (fp32 logits and a bf16 copy of dlogits). The CPU's bf16 logits are made through an
// fp32 scratch of logits_slab_cols(Vl) columns for the chunk's rows (4096 floats a row at most).
int64_t logits_chunk_bytes();
int64_t logits_slab_cols(int64_t Vl);
// max_rows > 0 lowers the cap on a chunk's rows (tests split small batches with it); the
// kMinChunkRows rule does not apply under a cap. (Below that many rows the products run slower:
// lm_head.cpp.)
constexpr int64_t kMinChunkRows = 288;
int64_t logits_chunk_rows(int64_t N, int64_t Vl, int bytes_per_logit, int64_t max_rows = 0);

class LMHead {
 public:
  LMHead() = default;
  // tied_weight_id: the word-embedding parameter when tied, else -1 (a separate lm_head is made).
  // ctx: the tensor-parallel group (null = one rank); must outlive the head.
  LMHead(ParamStore& store, const TransformerConfig& cfg, int tied_weight_id, const ParallelContext* ctx = nullptr);

  // x [N, C] (this rank's rows under sequence parallelism) -> logits [N, Vl] of all N rows (arena).
  Tensor logits(Arena& arena, const Tensor& x);
  // The same gathered over the vocabulary: [N, V] on every rank (inference and evaluation tools); the
  // uneven shards travel padded to the widest one and are trimmed.
  Tensor full_logits(Arena& arena, const Tensor& x);
  // Forward only: sum_n w_n CE_n (vocab-parallel), per-token losses [N] when not null.
  double loss(Arena& arena, const Tensor& x, const int32_t* targets, const float* weights, float* per_token_loss);
  // Under --bf16 with bf16 products (nn/precision.h) the three products of the loss run in bf16 with
  // fp32 accumulation, as Megatron's output layer does: x, the output matrix (a copy made once per
  // step) and dlogits in bf16. On the CPU the logits are rounded to bf16 too (as Megatron's), the
  // softmax and loss computed from them in fp32; a device keeps fp32 logits. Null = fp32.
  void set_precision(MixedPrecision* p) { prec_ = p && p->bf16_gemm() ? p : nullptr; }
  // At most this many rows a chunk of logits (0: by bytes only, the default); for tests.
  void limit_chunk_rows(int64_t rows) { max_chunk_rows_ = rows; }
  // Loss sum_n w_n CE_n over targets [N] (kIgnoreIndex where none) and weights [N] (null = 1); then the
  // backward: dx [N, C] written, output weight gradient accumulated. grad_scale multiplies dlogits.
  double loss_and_backward(Arena& arena, const Tensor& x, const int32_t* targets, const float* weights,
                           float grad_scale, Tensor& dx, float* per_token_loss);
  // On a device, targets and weights are device memory; host copies of the same arrays, given here
  // before loss_and_backward (and cleared with nulls after), let it select the rows that carry a loss
  // on the host and run the output layer on those only, as on the CPU. Without them every row goes
  // through.
  void set_host_labels(const int32_t* targets, const float* weights) {
    host_targets_ = targets;
    host_weights_ = weights;
  }

 private:
  Tensor shard_logits(Arena& arena, const Tensor& x_all);  // x [N, C] all rows -> [N, Vl]
  // -inf on the padded vocabulary's columns of n rows of logits [n, Vl] (fp32, or bf16 bits).
  void mask_padding(void* logits, bool bf16, int64_t n);
  // The arguments of the cross-entropy of a chunk of n rows (nn/vocab_parallel_cross_entropy.h) without
  // the gradient's buffers.
  CrossEntropyArgs chunk_loss(const void* logits, bool logits_bf16, float* losses, const int32_t* targets,
                              const float* weights, float grad_scale, int64_t n) const;
  // The rows that carry a loss, gathered (see lm_head.cpp); n == 0 or n == N: nothing is copied.
  struct LossRows {
    int64_t n = 0, N_all = 0;
    bool compact = false;      // n < N_all rows gathered; else x, targets, weights are the inputs
    int32_t* index = nullptr;  // [n] row of x
    Tensor x;                  // [n, C]
    const int32_t* targets = nullptr;
    const float* weights = nullptr;
    // On a device (index, targets, weights then device arrays): the inverse map as CSR for the scatter
    // of dx (offsets [N+1], order [n], device) and the index on the host for the per-token losses.
    int32_t* offsets = nullptr;
    int32_t* order = nullptr;
    std::vector<int32_t> host_index;
  };
  LossRows select_loss_rows(Arena& arena, const Backend& be, const Tensor& x_all, const int32_t* targets,
                            const float* weights) const;
  LossRows loss_rows(Arena& arena, const Tensor& x, const int32_t* targets, const float* weights) const;
  LossRows device_loss_rows(Arena& arena, const Backend& be, const Tensor& x) const;
  static void write_per_token_losses(const Backend& be, const LossRows& kept, const float* losses,
                                     float* per_token_loss);
  static void scatter_rows(float* out, const float* rows, const int32_t* index, int64_t n, int64_t N_all,
                           int64_t width);
  // logits [n, Vl] of rows x [n, C]; under the bf16 policy from xb, the same rows in bf16, and Wb, the
  // output matrix's bf16 copy (both null otherwise).
  void chunk_logits(float* logits, const float* x, const uint16_t* xb, const uint16_t* Wb, int64_t n);
  // Whether the logits are bf16 (the bf16 policy on the CPU), and the bytes a logit takes in a chunk.
  bool bf16_logits(const Backend& be) const;
  int bytes_per_logit(const Backend& be) const;
  ParamStore* store_ = nullptr;
  const ParallelContext* ctx_ = nullptr;
  MixedPrecision* prec_ = nullptr;
  int64_t V_ = 0, C_ = 0;
  int64_t vocab_start_ = 0, V_local_ = 0;
  int64_t token_cols_ = 0;  // this shard's columns [0, token_cols_) are tokens, the rest padding
  Tensor padding_bias_;     // [Vl] 0 or -inf, on a device (made on first use)
  int64_t max_chunk_rows_ = 0;
  int w_ = -1;
  const int32_t* host_targets_ = nullptr;  // set_host_labels
  const float* host_weights_ = nullptr;
};

}  // namespace megadlm
