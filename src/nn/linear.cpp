#include "nn/linear.h"

#include "kernels/backend.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

Linear::Linear(ParamStore& store, const ParallelContext& ctx, const std::string& name, int64_t in_features,
               int64_t out_features, bool bias, float init_std, LinearParallel mode, int64_t fused_blocks)
    : store_(&store), ctx_(&ctx), mode_(mode), in_(in_features), out_(out_features) {
  const int tp = ctx.tp.size, r = ctx.tp.rank;
  const int64_t O = out_features, I = in_features;
  if (mode == LinearParallel::Row) {
    MEGADLM_CHECK(I % tp == 0, name, ": ", I, " input features are not divisible by --tensor-model-parallel-size ", tp);
    in_ = I / tp;
    w_ = store.add_sharded(name + ".weight", {O, I}, 1, tp, r, Init::Normal, init_std, /*weight_decay=*/true);
    // Added once, after the reduction: replicated on every tp rank.
    if (bias) b_ = store.add(name + ".bias", {O}, Init::Zeros, 0.0f, /*weight_decay=*/false);
    return;
  }
  MEGADLM_CHECK(fused_blocks >= 1 && O % (fused_blocks * tp) == 0, name, ": ", O, " output features (",
                fused_blocks, " stacked block(s)) are not divisible by --tensor-model-parallel-size ", tp);
  out_ = O / tp;
  if (fused_blocks == 1 || tp == 1) {
    w_ = store.add_sharded(name + ".weight", {O, I}, 0, tp, r, Init::Normal, init_std, /*weight_decay=*/true);
    if (bias) b_ = store.add_sharded(name + ".bias", {O}, 0, tp, r, Init::Zeros, 0.0f, /*weight_decay=*/false);
  } else {
    // [fused, O/fused, I] split along dimension 1: the same rows of each block, so that e.g. SwiGLU's
    // gate and up columns of one rank pair up; the full tensor has [O, I]'s element order.
    const int64_t blk = O / fused_blocks;
    w_ = store.add_sharded(name + ".weight", {fused_blocks, blk, I}, 1, tp, r, Init::Normal, init_std, true);
    if (bias) b_ = store.add_sharded(name + ".bias", {fused_blocks, blk}, 1, tp, r, Init::Zeros, 0.0f, false);
  }
}

Tensor Linear::forward(Arena& arena, const Tensor& x) { return forward_impl(arena, x, nullptr, nullptr, nullptr); }

Tensor Linear::forward_into(Arena& arena, const Tensor& x, Tensor& out) {
  return forward_impl(arena, x, nullptr, nullptr, &out);
}

Tensor Linear::forward_into_without_bias(Arena& arena, const Tensor& x, Tensor& out) {
  MEGADLM_CHECK(mode_ == LinearParallel::Column, "Linear: only a column-parallel layer leaves its bias to the caller");
  return forward_impl(arena, x, nullptr, nullptr, &out, /*add_bias=*/false);
}

Tensor Linear::forward_shared_input(Arena& arena, const Tensor& x, const Linear& first) {
  return forward_impl(arena, x, &first, nullptr, nullptr);
}

Tensor Linear::forward_shared_input_into(Arena& arena, const Tensor& x, const Linear& first, Tensor& out) {
  return forward_impl(arena, x, &first, nullptr, &out);
}

Tensor Linear::forward_unsaved(Arena& arena, const Tensor& x, Tensor& out) {
  MEGADLM_CHECK(prec_ && prec_->mode() == PrecisionMode::BF16 && !prec_->bf16_gemm(),
                "Linear::forward_unsaved: only under bf16 storage (whose product reads the fp32 input)");
  return forward_impl(arena, x, nullptr, nullptr, &out, /*add_bias=*/true, /*keep_input=*/false);
}

Tensor Linear::forward_with_saved_input(Arena& arena, const Tensor& x, const Tensor& saved, Tensor& out) {
  MEGADLM_CHECK(can_share_saved_input(saved.dtype()), "Linear: a shared saved input of dtype ", dtype_name(saved.dtype()),
                " does not match this layer's precision policy");
  return forward_impl(arena, x, nullptr, &saved, &out);
}

// Row-parallel: the partial products are summed over tp (all-reduce, or reduce-scatter to this rank's
// rows under sequence parallelism) before the replicated bias is added, once.
Tensor Linear::bias_and_reduce(Arena& arena, Tensor& y, bool add_bias) {
  Tensor out = mode_ == LinearParallel::Row ? reduce_rows(arena, *ctx_, y) : y;
  if (b_ >= 0 && add_bias) backend_of(out).bias_add_forward(out.data<float>(), store_->value(b_).data<float>(), out.numel() / out_, out_);
  return out;
}

void Linear::share_saved_input(const Tensor& saved) {
  MEGADLM_CHECK(saved.raw() == nullptr || can_share_saved_input(saved.dtype()), "Linear: a shared saved input of dtype ",
                dtype_name(saved.dtype()), " does not match this layer's precision policy");
  saved_x_ = saved;
  saved_scale_ = 1.0f;
}

Tensor Linear::forward_impl(Arena& arena, const Tensor& x_in, const Linear* first, const Tensor* saved,
                            Tensor* out, bool add_bias, bool keep_input) {
  // Column-parallel under sequence parallelism: all rows of the input (identity otherwise).
  const Tensor x = mode_ == LinearParallel::Column && !caller_maps_input_ ? gather_rows(arena, *ctx_, x_in) : x_in;
  const Backend& be = backend_of(x);
  const int64_t N = x.numel() / in_;
  MEGADLM_CHECK(x.numel() == N * in_, "Linear: input ", x.shape().str(), " is not [N, ", in_, "]");
  Tensor y = out ? *out : arena.tensor({N, out_});
  MEGADLM_CHECK(y.numel() == N * out_, "Linear: output ", y.shape().str(), " is not [", N, ", ", out_, "]");
  if (!low_precision()) {
    saved_x_ = x;
    const float* W = store_->value(w_).data<float>();
    be.gemm(false, true, N, out_, in_, 1.0f, x.data<float>(), in_, W, in_, 0.0f, y.data<float>(), out_);
    return bias_and_reduce(arena, y, add_bias);
  }
  // The narrow copy of x, saved for the backward (shared by layers that read the same input).
  if (!keep_input) {
    saved_x_ = Tensor();
    saved_scale_ = 1.0f;
  } else if (first) {
    saved_x_ = first->saved_x_;
    saved_scale_ = first->saved_scale_;
  } else if (saved) {
    MEGADLM_CHECK(saved->numel() == N * in_, "Linear: shared saved input ", saved->shape().str(), " is not [", N, ", ",
                  in_, "]");
    saved_x_ = *saved;
    saved_scale_ = 1.0f;
  } else {
    saved_x_ = arena.tensor({N, in_}, prec_->saved_dtype());
    Fp8TensorScaling* s = prec_->mode() == PrecisionMode::FP8 ? &prec_->fp8_scaling(w_).input : nullptr;
    saved_scale_ = prec_->store_input(saved_x_.raw(), x.data<float>(), N * in_, s);
  }
  if (prec_->bf16_gemm()) {
    be.gemm_bf16(false, true, N, out_, in_, 1.0f, static_cast<const uint16_t*>(saved_x_.raw()), in_,
                   prec_->weight_bf16(w_), in_, 0.0f, y.data<float>(), out_);
  } else if (prec_->mode() == PrecisionMode::BF16) {
    // bf16 storage only: the forward product is exact fp32.
    be.gemm(false, true, N, out_, in_, 1.0f, x.data<float>(), in_, store_->value(w_).data<float>(), in_, 0.0f,
              y.data<float>(), out_);
  } else if (prec_->fp8_products()) {
    // fp8 products (a GPU with fp8 tensor cores): y [N, O] = x8 [N, I] @ W8 [O, I]^T, the codes and
    // their dequantisation factors.
    const MixedPrecision::Fp8Weight w8 = prec_->weight_fp8(w_);
    be.gemm_fp8(N, out_, in_, static_cast<const uint8_t*>(saved_x_.raw()), false, 1.0f / saved_scale_, w8.w, false,
                w8.dequant, 0.0f, y.data<float>());
  } else {
    // Emulated fp16 / fp8: the values the narrow format holds, multiplied in fp32.
    float* xr = prec_->scratch_f32(0, N * in_);
    prec_->load_input(xr, saved_x_.raw(), N * in_, saved_scale_);
    be.gemm(false, true, N, out_, in_, 1.0f, xr, in_, prec_->weight_rounded(w_), in_, 0.0f, y.data<float>(),
              out_);
  }
  return bias_and_reduce(arena, y, add_bias);
}

// Where the backward's dx [N, I] goes. Column-parallel at tp > 1: dx is this rank's partial sum; it is
// made in a staging buffer and then reduced into dx_in (all-reduce, or reduce-scatter to the local rows
// under sequence parallelism). Otherwise dx_in itself, written or added to.
Linear::DxTarget Linear::dx_target(int64_t N, Tensor& dx_in, bool accumulate_dx) const {
  const bool reduce = mode_ == LinearParallel::Column && ctx_->tp.size > 1 && !caller_maps_input_;
  const Device dev = dx_in.device();
  return {reduce ? Tensor::borrow(tp_scratch(N * in_, 2, dev), {N, in_}, DType::F32, dev) : dx_in, reduce,
          accumulate_dx && !reduce ? 1.0f : 0.0f};
}

// The two bf16 products of the backward, from dy [N, O] in bf16: dx [N, I] = dy @ W (see dx_target) and
// dW [O, I] += dy^T @ x.
void Linear::products_bf16_dy(const Backend& be, const uint16_t* dyb, int64_t N, Tensor& dx_in, bool accumulate_dx,
                              const std::function<void()>& before_weight_grad) {
  DxTarget t = dx_target(N, dx_in, accumulate_dx);
  be.gemm_bf16(false, false, N, in_, out_, 1.0f, dyb, out_, prec_->weight_bf16(w_), in_, t.beta, t.dx.data<float>(),
               in_);
  if (t.reduce) reduce_rows(*ctx_, t.dx, dx_in, accumulate_dx);
  if (before_weight_grad) before_weight_grad();
  const uint16_t* xb = static_cast<const uint16_t*>(saved_x_.raw());
  be.gemm_bf16(true, false, out_, in_, N, 1.0f, dyb, out_, xb, in_, store_->grad_beta(w_), store_->grad(w_).data<float>(),
               in_);
}

void Linear::backward_bf16_dy(const uint16_t* dy_bf16, int64_t N, Tensor& dx_in, bool accumulate_dx) {
  MEGADLM_CHECK(takes_bf16_dy(), "Linear::backward_bf16_dy: needs bf16 products and column parallelism");
  products_bf16_dy(backend_of(dx_in), dy_bf16, N, dx_in, accumulate_dx);
}

// The two fp8 products of the backward. cuBLASLt's fp8 kernels take only C = A @ B^T, so the operands
// whose reduced dimension is not contiguous come transposed: W^T (made with the weight's codes) for
// dx, and dy^T and x^T (transposed here) for dW. The codes are the values the emulated path multiplies.
void Linear::backward_fp8(const Backend& be, const Tensor& dy, int64_t N, Tensor& dx_in, bool accumulate_dx,
                          const std::function<void()>& before_weight_grad) {
  Fp8TensorScaling& s = prec_->fp8_scaling(w_).grad;
  const bool e5m2 = s.kind() == Fp8Kind::E5M2;
  uint8_t* g8 = prec_->scratch_u8(0, N * out_);
  const float g_dequant = 1.0f / prec_->quantize_grad(g8, dy.data<float>(), N * out_, s);
  const MixedPrecision::Fp8Weight w8 = prec_->weight_fp8(w_);
  // dx [N, I] = dy [N, O] @ W [O, I] = dy @ (W^T [I, O])^T
  DxTarget t = dx_target(N, dx_in, accumulate_dx);
  be.gemm_fp8(N, in_, out_, g8, e5m2, g_dequant, w8.wt, false, w8.dequant, t.beta, t.dx.data<float>());
  if (t.reduce) reduce_rows(*ctx_, t.dx, dx_in, accumulate_dx);
  if (before_weight_grad) before_weight_grad();
  // dW [O, I] += dy^T [O, N] @ x [N, I] = dy^T @ (x^T [I, N])^T
  uint8_t* gt = prec_->scratch_u8(1, N * out_);
  uint8_t* xt = prec_->scratch_u8(2, N * in_);
  be.transpose_u8(gt, g8, N, out_);
  be.transpose_u8(xt, static_cast<const uint8_t*>(saved_x_.raw()), N, in_);
  be.gemm_fp8(out_, in_, N, gt, e5m2, g_dequant, xt, false, 1.0f / saved_scale_, store_->grad_beta(w_),
              store_->grad(w_).data<float>());
}

void Linear::backward(const Tensor& dy_in, Tensor& dx_in, bool accumulate_dx,
                      const std::function<void()>& before_weight_grad) {
  // Row-parallel under sequence parallelism: the output gradient of all rows (identity otherwise).
  const Tensor dy = mode_ == LinearParallel::Row ? gather_rows_scratch(*ctx_, dy_in, 0) : dy_in;
  const Backend& be = backend_of(dy);
  const int64_t N = dy.numel() / out_;
  if (prec_ && prec_->bf16_gemm()) {
    uint16_t* dyb = prec_->scratch_u16(0, N * out_);
    if (b_ >= 0) be.cast_bf16_and_bias_backward(dyb, store_->grad(b_).data<float>(), dy.data<float>(), N, out_);
    else be.cast_f32_to_bf16(dyb, dy.data<float>(), N * out_);
    products_bf16_dy(be, dyb, N, dx_in, accumulate_dx, before_weight_grad);
    return;
  }
  if (b_ >= 0) be.bias_backward(store_->grad(b_).data<float>(), dy.data<float>(), N, out_);
  if (prec_ && prec_->fp8_products()) {
    backward_fp8(be, dy, N, dx_in, accumulate_dx, before_weight_grad);
    return;
  }
  const float* g = dy.data<float>();
  const float* W = store_->value(w_).data<float>();
  // The emulated modes round the gradient and use the rounded weight copy, so both backward products
  // see what the narrow format would hold.
  if (low_precision() && prec_->mode() != PrecisionMode::BF16) {
    float* gr = prec_->scratch_f32(1, N * out_);
    Fp8TensorScaling* s = prec_->mode() == PrecisionMode::FP8 ? &prec_->fp8_scaling(w_).grad : nullptr;
    prec_->round_grad(gr, g, N * out_, s);
    g = gr;
    W = prec_->weight_rounded(w_);
  }
  // dx [N, I] = dy [N, O] @ W [O, I]
  DxTarget t = dx_target(N, dx_in, accumulate_dx);
  be.gemm(false, false, N, in_, out_, 1.0f, g, out_, W, in_, t.beta, t.dx.data<float>(), in_);
  if (t.reduce) reduce_rows(*ctx_, t.dx, dx_in, accumulate_dx);
  if (before_weight_grad) before_weight_grad();
  // The saved input (back in fp32 under a precision policy).
  const float* x = low_precision() ? nullptr : saved_x_.data<float>();
  if (low_precision()) {
    float* xr = prec_->scratch_f32(0, N * in_);
    prec_->load_input(xr, saved_x_.raw(), N * in_, saved_scale_);
    x = xr;
  }
  // dW [O, I] += dy^T [O, N] @ x [N, I]
  be.gemm(true, false, out_, in_, N, 1.0f, g, out_, x, in_, store_->grad_beta(w_), store_->grad(w_).data<float>(), in_);
}

}  // namespace megadlm
