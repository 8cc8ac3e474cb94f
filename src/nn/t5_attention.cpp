#include "nn/t5_attention.h"

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

Tensor T5Attention::forward(Arena& arena, const Tensor& x, const Tensor& kv, const T5AttentionGeometry& g) {
  MEGADLM_CHECK(x.device() == Device::CPU, "T5's attention runs on the CPU only (docs/t5.md)");
  MEGADLM_CHECK(x.size(0) == g.B * g.T && kv.size(0) == g.B * g.S && (!g.causal || g.T == g.S),
                "T5Attention: ", x.size(0), " query rows and ", kv.size(0), " key rows for ", g.B, " sequences of ", g.T,
                " and ", g.S);
  geo_ = g;
  const int64_t B = g.B, T = g.T, S = g.S, HD = H_ * D_;
  const Backend& be = backend_of(x);
  q_ = q_proj_.forward(arena, x);
  k_ = k_proj_.forward(arena, kv);
  v_ = v_proj_.forward(arena, kv);
  probs_ = arena.tensor({B * H_ * T, S});
  float* p = probs_.data<float>();
  const float* q = q_.data<float>();
  const float* k = k_.data<float>();
  const float* v = v_.data<float>();
  constexpr float kHidden = std::numeric_limits<float>::lowest();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h) {
      float* s = p + (b * H_ + h) * T * S;  // scores [T, S] = q_bh k_bh^T (+ bias_h), hidden keys lowest
      be.gemm(false, true, T, S, D_, 1.0f, q + b * T * HD + h * D_, HD, k + b * S * HD + h * D_, HD, 0.0f, s, S);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j) {
          float& e = s[i * S + j];
          if (g.bias) e += g.bias[(h * T + i) * S + j];
          if (!visible(b, i, j)) e = kHidden;
        }
    }
  be.softmax_forward(p, p, B * H_ * T, S);
  Tensor o = arena.tensor({B * T, HD});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h)  // o_bh [T, D] = probs_bh v_bh
      be.gemm(false, false, T, D_, S, 1.0f, p + (b * H_ + h) * T * S, S, v + b * S * HD + h * D_, HD, 0.0f,
              o.data<float>() + b * T * HD + h * D_, HD);
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
          if (!visible(b, i, j)) d[i * S + j] = 0.0f;
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
