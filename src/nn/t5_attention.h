#pragma once
// T5's attention (HuggingFace's T5Attention), self or cross: q from x, k and v from kv (x itself in
// self-attention, the encoder's output in cross-attention), each [C -> H*D] without bias, o [H*D -> C];
// the inner size H*D need not be C (HF's d_kv). The scores are q k^T WITHOUT the 1/sqrt(D) scaling
// (T5 folds it into q's initialisation), plus the relative position bias [H, T, S] when given
// (nn/t5_relative_bias.h; the same for every sequence); keys invisible to a query (padding, the future
// under a causal mask) get the lowest float as their score, as HF's additive mask leaves them.
// The slow, obvious form through the Backend: per (sequence, head) the scores as one product, the bias
// and the masks, Backend::softmax_forward, the output as a second product; the probabilities
// [B, H, T, S] are kept for the backward. Under a precision policy (set_precision) the four
// projections' products follow it; the scores, the softmax and the probabilities' products stay fp32.
// Tensor parallelism (Megatron's attention split): rank r holds heads [r*Hl, (r+1)*Hl), Hl = H/tp: q, k
// and v are column-parallel over the heads (their input gradients summed over tp by Linear), o is
// row-parallel (its output summed over tp by Linear); the bias given is this rank's heads' [Hl, T, S].
// Every other shape below with H reads Hl on a rank.
// Generation (forward only) splits the forward in two: keys_values projects rows into a cache once, and
// forward_cached attends over cached keys and values (nn/t5_decoder_cache.h; T5Stack::decode_step).
// Legend: B sequences, T query rows and S key rows a sequence, C hidden, H heads, D head dim, R the rows a
// sequence holds in a cache (S of them in use).
#include <cstdint>
#include <string>

#include "core/arena.h"
#include "nn/linear.h"
#include "nn/transformer_config.h"

namespace megadlm {

class Backend;

// Which scores a forward computes and which keys each query sees.
struct T5AttentionGeometry {
  int64_t B = 0, T = 0, S = 0;
  const float* bias = nullptr;        // [Hl, T, S] added to every sequence's scores, or null
  const int32_t* key_mask = nullptr;  // [B*S] 1 a key, 0 padding (seen by no query), or null
  bool causal = false;                // key j seen by query i only when j <= i (T == S)
  int64_t key_rows = 0;               // R: rows a sequence holds in k, v and key_mask (0: S)
  int64_t rows() const { return key_rows > 0 ? key_rows : S; }
};

class T5Attention {
 public:
  T5Attention() = default;
  // Registers name.{q,k,v,o}_proj.weight.
  T5Attention(ParamStore& store, const ParallelContext& ctx, const std::string& name, const TransformerConfig& cfg);

  // x [B*T, C], kv [B*S, C] -> y [B*T, C] (arena). Saves q, k, v, the probabilities and the geometry.
  Tensor forward(Arena& arena, const Tensor& x, const Tensor& kv, const T5AttentionGeometry& g);
  // dy [B*T, C] -> dx [B*T, C] written by q's part; then kv's gradient [B*S, C] added to dkv (which may
  // be dx itself: self-attention); dbias [H, T, S] added to (the sum over the sequences) when the
  // forward had a bias, else null.
  void backward(Arena& arena, const Tensor& dy, Tensor& dx, Tensor& dkv, float* dbias);
  void set_precision(MixedPrecision* p) {  // nn/precision.h; null = fp32
    for (Linear* l : {&q_proj_, &k_proj_, &v_proj_, &o_proj_}) l->set_precision(p);
  }

  int64_t inner_size() const { return H_ * D_; }  // this rank's H*D

  // Generation, forward only (what the projections save for a backward is overwritten: no backward
  // follows). kv [B*n, C] -> its keys and values, sequence b's row i written to row b*R + at + i of
  // k and v [B*R, H*D].
  void keys_values(Arena& arena, const Tensor& kv, int64_t n, float* k, float* v, int64_t R, int64_t at);
  // x [B*T, C] against keys and values k, v [B*R, H*D] (g.key_rows R, of which sequence b's first g.S
  // rows are read) -> y [B*T, C] (arena); forward only, as keys_values.
  Tensor forward_cached(Arena& arena, const Tensor& x, const float* k, const float* v, const T5AttentionGeometry& g);

 private:
  static bool visible(const T5AttentionGeometry& g, int64_t b, int64_t i, int64_t j) {
    return (!g.key_mask || g.key_mask[b * g.rows() + j] != 0) && (!g.causal || j <= i);
  }
  // The attention proper: q [B*T, H*D], k and v [B*R, H*D] -> the probabilities p [B*H*T, S] and the
  // heads' outputs o [B*T, H*D].
  void attend(const Backend& be, const T5AttentionGeometry& g, const float* q, const float* k, const float* v,
              float* p, float* o) const;
  int64_t H_ = 0, D_ = 0;  // H_: this rank's heads, Hl
  Linear q_proj_, k_proj_, v_proj_, o_proj_;
  // Saved by forward.
  T5AttentionGeometry geo_;
  Tensor q_, k_, v_;  // [B*T, H*D], [B*S, H*D] twice
  Tensor probs_;      // [B, H, T, S]
};

}  // namespace megadlm
