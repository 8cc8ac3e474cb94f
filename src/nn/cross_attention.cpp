#include "nn/cross_attention.h"

#include <cmath>

#include "kernels/backend.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

CrossAttention::CrossAttention(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                               const TransformerConfig& cfg, float output_init_std)
    : name_(name), ctx_(&ctx), C_(cfg.hidden_size), D_(cfg.kv_channels) {
  MEGADLM_CHECK(!sequence_parallel(ctx), name, ": cross-attention does not support --sequence-parallel");
  // The input gradients of q (from x) and of k and v (from the memory) are reduced over tp here, once each.
  proj_ = make_attention_projections(store, ctx, name, cfg, output_init_std);
  H_ = proj_.H;
  K_ = proj_.K;
}

void CrossAttention::set_precision(MixedPrecision* p) {
  for (Linear* l : {&proj_.q, &proj_.k, &proj_.v, &proj_.o}) l->set_precision(p);
}

Tensor CrossAttention::forward(Arena& arena, const Tensor& x, const BatchInfo& batch) {
  MEGADLM_CHECK(batch.memory != nullptr && batch.memory_T > 0, name_,
                ": cross-attention needs the other stack's output (BatchInfo::memory)");
  batch_ = batch;
  const int64_t B = batch.B, T = batch.T, S = batch.memory_T, N = B * T, M = B * S;
  const int64_t HD = H_ * D_, KD = K_ * D_, group = H_ / K_;
  const Backend& be = backend_of(x);
  const Tensor memory = Tensor::borrow(const_cast<float*>(batch.memory), {M, C_}, DType::F32, x.device());
  q_ = proj_.q.forward(arena, x);       // [N, H*D]
  k_ = proj_.k.forward(arena, memory);  // [M, K*D]
  v_ = proj_.v.forward(arena, memory);  // [M, K*D]
  probs_ = arena.tensor({B * H_ * T, S});
  Tensor o = arena.tensor({N, HD});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
  const float* q = q_.data<float>();
  const float* k = k_.data<float>();
  const float* v = v_.data<float>();
  float* p = probs_.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h)  // scores [T, S] = scale q_bh k_bg^T
      be.gemm(false, true, T, S, D_, scale, q + b * T * HD + h * D_, HD, k + b * S * KD + h / group * D_, KD, 0.0f,
              p + (b * H_ + h) * T * S, S);
  be.softmax_forward(p, p, B * H_ * T, S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h)  // o_bh [T, D] = probs_bh v_bg
      be.gemm(false, false, T, D_, S, 1.0f, p + (b * H_ + h) * T * S, S, v + b * S * KD + h / group * D_, KD, 0.0f,
              o.data<float>() + b * T * HD + h * D_, HD);
  return proj_.o.forward(arena, o);
}

void CrossAttention::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  MEGADLM_CHECK(batch_.memory_grad != nullptr, name_,
                ": the backward needs where the memory's gradient goes (BatchInfo::memory_grad)");
  const int64_t B = batch_.B, T = batch_.T, S = batch_.memory_T, N = B * T, M = B * S;
  const int64_t HD = H_ * D_, KD = K_ * D_, group = H_ / K_;
  const Backend& be = backend_of(dy);
  const size_t mark = arena.mark();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
  Tensor d_o = arena.tensor({N, HD});
  proj_.o.backward(dy, d_o, false);
  const float* q = q_.data<float>();
  const float* k = k_.data<float>();
  const float* v = v_.data<float>();
  const float* p = probs_.data<float>();
  const float* dov = d_o.data<float>();
  // dprobs_bh = do_bh v_bg^T, then the softmax's backward in place: the scores' gradient.
  Tensor ds = arena.tensor({B * H_ * T, S});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h)
      be.gemm(false, true, T, S, D_, 1.0f, dov + b * T * HD + h * D_, HD, v + b * S * KD + h / group * D_, KD, 0.0f,
              ds.data<float>() + (b * H_ + h) * T * S, S);
  be.softmax_backward(ds.data<float>(), p, ds.data<float>(), B * H_ * T, S);
  // dq_bh = scale ds_bh k_bg; dk_bg += scale ds_bh^T q_bh; dv_bg += probs_bh^T do_bh (the heads of a
  // group in order).
  Tensor dq = arena.tensor({N, HD});
  Tensor dk = arena.zeros({M, KD});
  Tensor dv = arena.zeros({M, KD});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H_; ++h) {
      const float* ds_bh = ds.data<float>() + (b * H_ + h) * T * S;
      const int64_t kv = b * S * KD + h / group * D_;
      be.gemm(false, false, T, D_, S, scale, ds_bh, S, k + kv, KD, 0.0f, dq.data<float>() + b * T * HD + h * D_, HD);
      be.gemm(true, false, S, D_, T, scale, ds_bh, S, q + b * T * HD + h * D_, HD, 1.0f, dk.data<float>() + kv, KD);
      be.gemm(true, false, S, D_, T, 1.0f, p + (b * H_ + h) * T * S, S, dov + b * T * HD + h * D_, HD, 1.0f,
              dv.data<float>() + kv, KD);
    }
  // The input gradients: this rank's partial sums, reduced over tp.
  const bool split = ctx_->tp.size > 1;
  Tensor dxp = split ? arena.tensor({N, C_}) : dx;
  proj_.q.backward(dq, dxp, false);
  if (split) reduce_rows(*ctx_, dxp, dx, false);
  Tensor dm = arena.tensor({M, C_});
  proj_.k.backward(dk, dm, false);
  proj_.v.backward(dv, dm, true);
  if (split) reduce_rows(*ctx_, dm, dm, false);
  be.add_inplace(batch_.memory_grad, dm.data<float>(), M * C_);
  arena.release(mark);
}

}  // namespace megadlm
