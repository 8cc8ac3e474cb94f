#include "nn/attention.h"

#include "kernels/backend.h"
#include "nn/ring_attention.h"
#include "parallel/tp_mappings.h"

#include <algorithm>
#include <cmath>

namespace megadlm {

SelfAttention::SelfAttention(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                             const TransformerConfig& cfg, const SelfAttentionSpec& spec, float output_init_std)
    : store_(&store), ctx_(&ctx), cfg_(cfg), spec_(spec), D_(cfg.kv_channels) {
  proj_ = make_attention_projections(store, ctx, name, cfg, output_init_std);
  H_ = proj_.H;
  K_ = proj_.K;
  if (spec.qk_norm) {
    q_norm_ = store.add(name + ".q_norm.weight", {D_}, Init::Ones, 0.0f, false);
    k_norm_ = store.add(name + ".k_norm.weight", {D_}, Init::Ones, 0.0f, false);
  }
  if (cfg.position_embedding == PositionEmbedding::Rope) {
    const int64_t P = cfg.max_position_embeddings;
    rope_cos_ = Tensor::empty({P, D_ / 2}, DType::F32, store.device());
    rope_sin_ = Tensor::empty({P, D_ / 2}, DType::F32, store.device());
    backend_for(store.device())
        .rope_tables(rope_cos_.data<float>(), rope_sin_.data<float>(), P, D_, cfg.rotary_base);
  }
}

void SelfAttention::set_precision(MixedPrecision* p) {
  prec_ = p && p->mode() != PrecisionMode::FP32 ? p : nullptr;
  for (Linear* l : {&proj_.q, &proj_.k, &proj_.v, &proj_.o}) l->set_precision(p);
}

AttentionMask SelfAttention::mask() const {
  AttentionMask m;
  m.type = batch_.block_diffusion > 0 ? MaskType::BlockDiffusion : spec_.mask;
  m.block_size = batch_.block_diffusion > 0 ? batch_.block_diffusion : spec_.block_size;
  m.segment_ids = batch_.segment_ids;
  return m;
}

RingAttentionArgs SelfAttention::ring_args() const {
  // The ring pairs whole chunks under prefix masks; the two halves of block diffusion's layout are not one.
  MEGADLM_CHECK(batch_.block_diffusion == 0, "block diffusion's training layout does not run under context parallelism");
  RingAttentionArgs a;
  a.B = batch_.B;
  a.T = batch_.T;
  a.H = H_;
  a.K = K_;
  a.D = D_;
  a.mask = spec_.mask;
  a.block_size = spec_.block_size;
  a.sequence_segments = batch_.sequence_segment_ids;
  a.scale = 1.0f / std::sqrt(static_cast<float>(D_));
  return a;
}

void SelfAttention::attend(Arena& arena, float* out, const float* q, const float* k, const float* v) {
  if (ctx_->cp.size > 1) {
    ring_attention_forward(arena, *ctx_, ring_args(), out, lse_.data<float>(), q, k, v);
    return;
  }
  backend_for(arena.device()).attention_forward(out, lse_.data<float>(), q, k, v, batch_.B, batch_.T, H_, K_, D_,
                                                     mask(), 1.0f / std::sqrt(static_cast<float>(D_)));
}

void SelfAttention::normalize_and_rotate(Arena& arena, Arena& work, Tensor& q, Tensor& k) {
  const int64_t N = batch_.B * batch_.T;
  const Backend& be = backend_of(q);
  if (q_norm_ >= 0) {
    // The raw projections are kept (fp32) for the norm's backward; q, k become the normed copies.
    q_raw_ = q;
    k_raw_ = k;
    if (prec_) {  // q, k were made in the transient arena: keep copies
      q_raw_ = arena.tensor(q.shape());
      k_raw_ = arena.tensor(k.shape());
      q_raw_.copy_from(q);
      k_raw_.copy_from(k);
    }
    q_rstd_ = arena.tensor({N * H_});
    k_rstd_ = arena.tensor({N * K_});
    q = work.tensor({N, H_ * D_});
    k = work.tensor({N, K_ * D_});
    be.rmsnorm_forward(q.data<float>(), q_rstd_.data<float>(), q_raw_.data<float>(),
                         store_->value(q_norm_).data<float>(), N * H_, D_, cfg_.norm_epsilon);
    be.rmsnorm_forward(k.data<float>(), k_rstd_.data<float>(), k_raw_.data<float>(),
                         store_->value(k_norm_).data<float>(), N * K_, D_, cfg_.norm_epsilon);
  }
  if (cfg_.position_embedding == PositionEmbedding::Rope) {
    // In place: the rotated q, k are what the attention backward needs.
    be.rope_forward(q.data<float>(), q.data<float>(), batch_.positions, rope_cos_.data<float>(),
                      rope_sin_.data<float>(), N, H_, D_);
    be.rope_forward(k.data<float>(), k.data<float>(), batch_.positions, rope_cos_.data<float>(),
                      rope_sin_.data<float>(), N, K_, D_);
  }
}

Tensor SelfAttention::forward(Arena& arena, const Tensor& x_local, const BatchInfo& batch) {
  batch_ = batch;
  if (prec_) return forward_low_precision(arena, x_local);
  const Tensor x = gather_rows(arena, *ctx_, x_local);  // all N rows (sequence parallel: gathered)
  const int64_t N = batch.B * batch.T;
  Tensor q = proj_.q.forward(arena, x);                          // [N, H*D]
  Tensor k = proj_.k.forward_shared_input(arena, x, proj_.q);    // [N, K*D]
  v_ = proj_.v.forward_shared_input(arena, x, proj_.q);          // [N, K*D]
  normalize_and_rotate(arena, arena, q, k);
  q_ = q;
  k_ = k;
  attn_out_ = arena.tensor({N, H_ * D_});
  lse_ = arena.tensor({batch.B * H_ * batch.T});
  bf16_attention_ = false;
  attend(arena, attn_out_.data<float>(), q_.data<float>(), k_.data<float>(), v_.data<float>());
  return proj_.o.forward(arena, attn_out_);
}

// Under a precision policy: the fp32 q, k, v and attention output live in the policy's transient
// arena; the arena keeps their narrow copies (plus the log-sum-exp and the projections' saved inputs).
Tensor SelfAttention::forward_low_precision(Arena& arena, const Tensor& x_local) {
  Arena& tmp = prec_->transient();
  const size_t mark = tmp.mark();
  const Tensor x = gather_rows(tmp, *ctx_, x_local);
  const int64_t N = batch_.B * batch_.T;
  const DType narrow = activation_dtype(*prec_);
  Tensor q = tmp.tensor({N, H_ * D_}), k = tmp.tensor({N, K_ * D_}), v = tmp.tensor({N, K_ * D_});
  proj_.q.forward_into(arena, x, q);
  proj_.k.forward_shared_input_into(arena, x, proj_.q, k);
  proj_.v.forward_shared_input_into(arena, x, proj_.q, v);
  normalize_and_rotate(arena, tmp, q, k);
  // Narrow copies for the backward. The forward itself runs on the fp32 values, as the MLP's
  // activation does (--bf16-storage-only therefore keeps an exact fp32 forward).
  q_ = arena.tensor(q.shape(), narrow);
  k_ = arena.tensor(k.shape(), narrow);
  v_ = arena.tensor(v.shape(), narrow);
  store_activation(*prec_, q_, q);
  store_activation(*prec_, k_, k);
  store_activation(*prec_, v_, v);
  Tensor o = tmp.tensor({N, H_ * D_});
  lse_ = arena.tensor({batch_.B * H_ * batch_.T});
  const Backend& be = backend_of(x);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
  // With bf16 products the attention's own products take the bf16 copies too (bf16 tile products, fp32
  // softmax and accumulation, as flash-attention on GPUs); bf16 storage only, fp16 and fp8 keep fp32.
  // (Backend::attention_forward_bf16: on a GPU cuDNN's fused attention where it applies.)
  bf16_attention_ = narrow == DType::BF16 && prec_->bf16_gemm() && ctx_->cp.size == 1;
  if (ctx_->cp.size > 1) {
    attend(arena, o.data<float>(), q.data<float>(), k.data<float>(), v.data<float>());
  } else if (bf16_attention_) {
    be.attention_forward_bf16(o.data<float>(), lse_.data<float>(), q_.data<uint16_t>(), k_.data<uint16_t>(),
                              v_.data<uint16_t>(), batch_.B, batch_.T, H_, K_, D_, mask(), scale);
  } else {
    be.attention_forward(o.data<float>(), lse_.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(),
                         batch_.B, batch_.T, H_, K_, D_, mask(), scale);
  }
  attn_out_ = arena.tensor(o.shape(), narrow);
  store_activation(*prec_, attn_out_, o);
  Tensor y;
  if (proj_.o.can_share_saved_input(narrow)) {
    Tensor out = arena.tensor({N, cfg_.hidden_size});
    y = proj_.o.forward_with_saved_input(arena, o, attn_out_, out);
  } else {
    y = proj_.o.forward(arena, o);  // fp8: its own E4M3 copy with its scale
  }
  tmp.release(mark);
  return y;
}

Tensor SelfAttention::forward_cached(Arena& arena, const Tensor& x, const BatchInfo& batch, const CacheRows& cache) {
  const int64_t B = batch.B, Tn = batch.T, N = B * Tn, S = cache.S;
  const int64_t* offsets = cache.offsets;
  float* k_cache = cache.k;
  float* v_cache = cache.v;
  const Backend& be = backend_of(x);
  Tensor q = proj_.q.forward(arena, x);  // [N, H*D]
  Tensor k = proj_.k.forward(arena, x);  // [N, K*D]
  Tensor v = proj_.v.forward(arena, x);  // [N, K*D]
  if (q_norm_ >= 0) {
    Tensor qn = arena.tensor({N, H_ * D_}), kn = arena.tensor({N, K_ * D_});
    Tensor rq = arena.tensor({N * H_}), rk = arena.tensor({N * K_});
    be.rmsnorm_forward(qn.data<float>(), rq.data<float>(), q.data<float>(), store_->value(q_norm_).data<float>(),
                         N * H_, D_, cfg_.norm_epsilon);
    be.rmsnorm_forward(kn.data<float>(), rk.data<float>(), k.data<float>(), store_->value(k_norm_).data<float>(),
                         N * K_, D_, cfg_.norm_epsilon);
    q = qn;
    k = kn;
  }
  if (cfg_.position_embedding == PositionEmbedding::Rope) {
    be.rope_forward(q.data<float>(), q.data<float>(), batch.positions, rope_cos_.data<float>(),
                      rope_sin_.data<float>(), N, H_, D_);
    be.rope_forward(k.data<float>(), k.data<float>(), batch.positions, rope_cos_.data<float>(),
                      rope_sin_.data<float>(), N, K_, D_);
  }
  // The new rows' keys and values into the cache (on the cache's device, as the layers'); offsets are
  // host values, checked here, and uploaded for a device's kernel.
  const int64_t KD = K_ * D_;
  const size_t row_bytes = static_cast<size_t>(Tn * KD) * sizeof(float);
  for (int64_t b = 0; b < B; ++b) {
    MEGADLM_CHECK(offsets[b] >= 0 && offsets[b] + Tn <= S, "KV cache: rows [", offsets[b], ", ", offsets[b] + Tn,
                  ") exceed its capacity ", S);
    be.copy(k_cache + (b * S + offsets[b]) * KD, k.data<float>() + b * Tn * KD, row_bytes);
    be.copy(v_cache + (b * S + offsets[b]) * KD, v.data<float>() + b * Tn * KD, row_bytes);
  }
  const int64_t* offs = offsets;
  if (be.device() != Device::CPU) {
    auto* d = static_cast<int64_t*>(arena.allocate(static_cast<size_t>(B) * sizeof(int64_t)));
    be.copy_to_device(d, offsets, static_cast<size_t>(B) * sizeof(int64_t));
    offs = d;
  }
  Tensor o = arena.tensor({N, H_ * D_});
  be.decode_attention_forward(o.data<float>(), q.data<float>(), k_cache, v_cache, offs, B, Tn, S, H_, K_, D_, cache.causal,
                              1.0f / std::sqrt(static_cast<float>(D_)));
  return proj_.o.forward(arena, o);
}

void SelfAttention::backward(Arena& arena, const Tensor& dy, Tensor& dx) {
  const int64_t N = batch_.B * batch_.T;
  const Backend& be = backend_of(dy);
  const size_t mark = arena.mark();
  Tensor d_attn = arena.tensor({N, H_ * D_});
  proj_.o.backward(dy, d_attn, false);
  Tensor dq = arena.tensor({N, H_ * D_});
  Tensor dk = arena.tensor({N, K_ * D_});
  Tensor dv = arena.tensor({N, K_ * D_});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
  if (bf16_attention_) {
    be.attention_backward_bf16(dq.data<float>(), dk.data<float>(), dv.data<float>(), d_attn.data<float>(),
                               q_.data<uint16_t>(), k_.data<uint16_t>(), v_.data<uint16_t>(),
                               attn_out_.data<uint16_t>(), lse_.data<float>(), batch_.B, batch_.T, H_, K_, D_, mask(),
                               scale);
  } else {
    // Under a precision policy the saved q, k, v and output are narrow: back to fp32 in temporaries.
    Tensor q = q_, k = k_, v = v_, o = attn_out_;
    if (q_.dtype() != DType::F32) {
      for (auto [wide, kept] : {std::pair<Tensor*, const Tensor*>{&q, &q_}, {&k, &k_}, {&v, &v_}, {&o, &attn_out_}}) {
        *wide = arena.tensor(kept->shape());
        load_activation(*wide, *kept);
      }
    }
    if (ctx_->cp.size > 1) {
      ring_attention_backward(arena, *ctx_, ring_args(), dq.data<float>(), dk.data<float>(), dv.data<float>(),
                              d_attn.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), o.data<float>(),
                              lse_.data<float>());
    } else {
      be.attention_backward(dq.data<float>(), dk.data<float>(), dv.data<float>(), d_attn.data<float>(),
                            q.data<float>(), k.data<float>(), v.data<float>(), o.data<float>(), lse_.data<float>(),
                            batch_.B, batch_.T, H_, K_, D_, mask(), scale);
    }
  }
  if (cfg_.position_embedding == PositionEmbedding::Rope) {
    be.rope_backward(dq.data<float>(), dq.data<float>(), batch_.positions, rope_cos_.data<float>(),
                       rope_sin_.data<float>(), N, H_, D_);
    be.rope_backward(dk.data<float>(), dk.data<float>(), batch_.positions, rope_cos_.data<float>(),
                       rope_sin_.data<float>(), N, K_, D_);
  }
  if (q_norm_ >= 0) {
    Tensor dq_raw = arena.tensor({N, H_ * D_});
    Tensor dk_raw = arena.tensor({N, K_ * D_});
    // The QK-norm weights are shared by all heads: at tp > 1 each rank sees only its heads, so the
    // weight gradients are made in a zeroed buffer and summed over the tp ranks.
    const bool split = ctx_->tp.size > 1;
    Tensor gqk = split ? arena.zeros({2 * D_}) : Tensor();
    float* gq = split ? gqk.data<float>() : store_->grad(q_norm_).data<float>();
    float* gk = split ? gqk.data<float>() + D_ : store_->grad(k_norm_).data<float>();
    be.rmsnorm_backward(dq_raw.data<float>(), gq, dq.data<float>(),
                          q_raw_.data<float>(), store_->value(q_norm_).data<float>(), q_rstd_.data<float>(),
                          N * H_, D_);
    be.rmsnorm_backward(dk_raw.data<float>(), gk, dk.data<float>(),
                          k_raw_.data<float>(), store_->value(k_norm_).data<float>(), k_rstd_.data<float>(),
                          N * K_, D_);
    if (split) {
      tp_all_reduce_sum(*ctx_, gqk.data<float>(), 2 * D_, be.device());
      be.add_inplace(store_->grad(q_norm_).data<float>(), gqk.data<float>(), D_);
      be.add_inplace(store_->grad(k_norm_).data<float>(), gqk.data<float>() + D_, D_);
    }
    dq = dq_raw;
    dk = dk_raw;
  }
  // At tp > 1 the three input gradients are summed locally, then over the tp ranks once (this rank's
  // rows under sequence parallelism).
  Tensor dxp = ctx_->tp.size > 1 ? arena.tensor({N, cfg_.hidden_size}) : dx;
  proj_.q.backward(dq, dxp, false);
  proj_.k.backward(dk, dxp, true);
  proj_.v.backward(dv, dxp, true);
  if (ctx_->tp.size > 1) reduce_rows(*ctx_, dxp, dx, false);
  arena.release(mark);
}

}  // namespace megadlm
