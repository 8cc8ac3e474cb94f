#include "nn/t5_attention.h"

#include <algorithm>
#include <limits>

#include "kernels/backend.h"

namespace megadlm {

T5Attention::T5Attention(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                         const TransformerConfig& cfg)
    : H_(cfg.num_attention_heads / ctx.tp.size), D_(cfg.kv_channels) {
  MEGADLM_CHECK(cfg.num_attention_heads % ctx.tp.size == 0, name, ": --num-attention-heads ", cfg.num_attention_heads,
                " is not divisible by --tensor-model-parallel-size ", ctx.tp.size);
  const int64_t C = cfg.hidden_size, HD = cfg.num_attention_heads * D_;  // the whole inner size
  const float std = cfg.init_method_std;
  q_proj_ = Linear(store, ctx, name + ".q_proj", C, HD, false, std);
  k_proj_ = Linear(store, ctx, name + ".k_proj", C, HD, false, std);
  v_proj_ = Linear(store, ctx, name + ".v_proj", C, HD, false, std);
  o_proj_ = Linear(store, ctx, name + ".o_proj", HD, C, false, std, LinearParallel::Row);
}

void T5Attention::attend(const Backend& be, const T5AttentionGeometry& g, const float* q, const float* k,
                         const float* v, float* p, float* o) const {
  const int64_t B = g.B, T = g.T, S = g.S, R = g.rows(), HD = H_ * D_;
  constexpr float kHidden = std::numeric_limits<float>::lowest();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h) {
      float* s = p + (b * H_ + h) * T * S;  // scores [T, S] = q_bh k_bh^T (+ bias_h), hidden keys lowest
      be.gemm(false, true, T, S, D_, 1.0f, q + b * T * HD + h * D_, HD, k + b * R * HD + h * D_, HD, 0.0f, s, S);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j) {
          float& e = s[i * S + j];
          if (g.bias) e += g.bias[(h * T + i) * S + j];
          if (!visible(g, b, i, j)) e = kHidden;
        }
    }
  be.softmax_forward(p, p, B * H_ * T, S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h)  // o_bh [T, D] = probs_bh v_bh
      be.gemm(false, false, T, D_, S, 1.0f, p + (b * H_ + h) * T * S, S, v + b * R * HD + h * D_, HD, 0.0f,
              o + b * T * HD + h * D_, HD);
}

Tensor T5Attention::forward(Arena& arena, const Tensor& x, const Tensor& kv, const T5AttentionGeometry& g) {
  MEGADLM_CHECK(x.device() == Device::CPU, "T5's attention runs on the CPU only (docs/t5.md)");
  MEGADLM_CHECK(x.size(0) == g.B * g.T && kv.size(0) == g.B * g.S && (!g.causal || g.T == g.S) && g.rows() == g.S,
                "T5Attention: ", x.size(0), " query rows and ", kv.size(0), " key rows for ", g.B, " sequences of ", g.T,
                " and ", g.S);
  geo_ = g;
  q_ = q_proj_.forward(arena, x);
  k_ = k_proj_.forward(arena, kv);
  v_ = v_proj_.forward(arena, kv);
  probs_ = arena.tensor({g.B * H_ * g.T, g.S});
  Tensor o = arena.tensor({g.B * g.T, H_ * D_});
  attend(backend_of(x), g, q_.data<float>(), k_.data<float>(), v_.data<float>(), probs_.data<float>(),
         o.data<float>());
  return o_proj_.forward(arena, o);
}

void T5Attention::keys_values(Arena& arena, const Tensor& kv, int64_t n, float* k, float* v, int64_t R, int64_t at) {
  MEGADLM_CHECK(kv.device() == Device::CPU, "T5's attention runs on the CPU only (docs/t5.md)");
  MEGADLM_CHECK(n >= 1 && kv.size(0) % n == 0 && at >= 0 && at + n <= R, "T5Attention::keys_values: ", kv.size(0),
                " rows in sequences of ", n, " at row ", at, " of a cache of ", R);
  const int64_t B = kv.size(0) / n, HD = H_ * D_;
  const size_t mark = arena.mark();
  const Tensor kp = k_proj_.forward(arena, kv), vp = v_proj_.forward(arena, kv);
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(kp.data<float>() + b * n * HD, n * HD, k + (b * R + at) * HD);
    std::copy_n(vp.data<float>() + b * n * HD, n * HD, v + (b * R + at) * HD);
  }
  arena.release(mark);
}

Tensor T5Attention::forward_cached(Arena& arena, const Tensor& x, const float* k, const float* v,
                                   const T5AttentionGeometry& g) {
  MEGADLM_CHECK(x.device() == Device::CPU, "T5's attention runs on the CPU only (docs/t5.md)");
  MEGADLM_CHECK(x.size(0) == g.B * g.T && g.S >= 1 && g.S <= g.rows() && (!g.causal || g.T == g.S),
                "T5Attention::forward_cached: ", x.size(0), " query rows for ", g.B, " sequences of ", g.T,
                " against ", g.S, " of ", g.rows(), " cached rows");
  const Tensor q = q_proj_.forward(arena, x);
  Tensor p = arena.tensor({g.B * H_ * g.T, g.S}), o = arena.tensor({g.B * g.T, H_ * D_});
  attend(backend_of(x), g, q.data<float>(), k, v, p.data<float>(), o.data<float>());
  return o_proj_.forward(arena, o);
}

void T5Attention::backward(Arena& arena, const Tensor& dy, Tensor& dx, Tensor& dkv, float* dbias) {
  const int64_t B = geo_.B, T = geo_.T, S = geo_.S, HD = H_ * D_;
  MEGADLM_CHECK(dbias == nullptr || geo_.bias != nullptr, "T5Attention::backward: a bias gradient without a bias");
  const Backend& be = backend_of(dy);
  const size_t mark = arena.mark();
  Tensor d_o = arena.tensor({B * T, HD});
  o_proj_.backward(dy, d_o, false);
  const float* q = q_.data<float>();
  const float* k = k_.data<float>();
  const float* v = v_.data<float>();
  const float* p = probs_.data<float>();
  const float* dov = d_o.data<float>();
  // dprobs_bh = do_bh v_bh^T, then the softmax's backward in place: the scores' gradient, zero where a
  // key is hidden (its score is a constant).
  Tensor ds_t = arena.tensor({B * H_ * T, S});
  float* ds = ds_t.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h)
      be.gemm(false, true, T, S, D_, 1.0f, dov + b * T * HD + h * D_, HD, v + b * S * HD + h * D_, HD, 0.0f,
              ds + (b * H_ + h) * T * S, S);
  be.softmax_backward(ds, p, ds, B * H_ * T, S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h) {
      float* d = ds + (b * H_ + h) * T * S;
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j) {
          if (!visible(geo_, b, i, j)) d[i * S + j] = 0.0f;
          else if (dbias) dbias[(h * T + i) * S + j] += d[i * S + j];
        }
    }
  // dq_bh = ds_bh k_bh; dk_bh = ds_bh^T q_bh; dv_bh = probs_bh^T do_bh.
  Tensor dq = arena.tensor({B * T, HD}), dk = arena.tensor({B * S, HD}), dv = arena.tensor({B * S, HD});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h) {
      const float* ds_bh = ds + (b * H_ + h) * T * S;
      const int64_t qo = b * T * HD + h * D_, ko = b * S * HD + h * D_;
      be.gemm(false, false, T, D_, S, 1.0f, ds_bh, S, k + ko, HD, 0.0f, dq.data<float>() + qo, HD);
      be.gemm(true, false, S, D_, T, 1.0f, ds_bh, S, q + qo, HD, 0.0f, dk.data<float>() + ko, HD);
      be.gemm(true, false, S, D_, T, 1.0f, p + (b * H_ + h) * T * S, S, dov + qo, HD, 0.0f, dv.data<float>() + ko, HD);
    }
  q_proj_.backward(dq, dx, false);
  k_proj_.backward(dk, dkv, true);
  v_proj_.backward(dv, dkv, true);
  arena.release(mark);
}

}  // namespace megadlm
