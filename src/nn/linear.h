#pragma once
// Linear layers, Megatron-style: ColumnParallel splits the output features across tensor-parallel
// ranks, RowParallel splits the input features and all-reduces its output. With tp = 1 both are the
// plain y = x W^T + b; the split and the reductions live here, not in the model code.
// Legend: N tokens (B*T), I input features, O output features. Weight stored [O, I] (PyTorch's layout).
#include <functional>
#include <string>

#include "core/arena.h"
#include "core/parameters.h"
#include "nn/precision.h"
#include "parallel/parallel_context.h"

namespace megadlm {

class Backend;

enum class LinearParallel : uint8_t { Column, Row };

class Linear {
 public:
  Linear() = default;
  // in_features / out_features are the full (unsharded) sizes. Column: this rank holds output rows
  // [r*O/tp, (r+1)*O/tp) of the weight and bias; with fused_blocks = 2 the output is two stacked
  // blocks (SwiGLU's [gate; up]) and this rank holds the same slice of each (weight [2, O/2, I] split
  // along dimension 1). Row: this rank holds input columns [r*I/tp, (r+1)*I/tp); the bias is whole.
  Linear(ParamStore& store, const ParallelContext& ctx, const std::string& name, int64_t in_features,
         int64_t out_features, bool bias, float init_std, LinearParallel mode = LinearParallel::Column,
         int64_t fused_blocks = 1);

  // x [N, I] -> y [N, O] from the arena. Saves a view of x for the backward (fp32), or a copy in the
  // narrow format of the precision policy (nn/precision.h).
  Tensor forward(Arena& arena, const Tensor& x);
  // The same with y written to `out` [N, O] (a caller's scratch) instead of the arena.
  Tensor forward_into(Arena& arena, const Tensor& x, Tensor& out);
  // forward_into without the bias, which the caller adds in its own next pass over y (bias_values());
  // column-parallel only (a row-parallel layer adds its bias after the reduction).
  Tensor forward_into_without_bias(Arena& arena, const Tensor& x, Tensor& out);
  // The same, for a layer whose input is the same tensor as `first`'s (q/k/v projections): the
  // narrow copy `first` saved is shared instead of made again (fp8: with `first`'s input scale).
  Tensor forward_shared_input(Arena& arena, const Tensor& x, const Linear& first);
  // forward_shared_input with y written to `out` [N, O].
  Tensor forward_shared_input_into(Arena& arena, const Tensor& x, const Linear& first, Tensor& out);
  // Under a precision policy whose saved dtype is `saved`'s (bf16, fp16; not fp8, whose copy carries
  // this layer's own scale): the caller already holds the narrow copy of x [N, I] that the backward
  // needs (the attention output, kept for the attention's own backward), so it is shared, not made
  // again. x is still read by the products of the storage-only and emulated paths. y -> out [N, O].
  Tensor forward_with_saved_input(Arena& arena, const Tensor& x, const Tensor& saved, Tensor& out);
  // Under bf16 storage only (fp32 products): y -> out [N, O] from the fp32 x, keeping no copy of x; the
  // caller hands the backward its saved input with share_saved_input (the MLP remakes fc2's input).
  Tensor forward_unsaved(Arena& arena, const Tensor& x, Tensor& out);
  // Replaces the saved input by `saved` (same contract as forward_with_saved_input) or forgets it
  // (an undefined tensor): for a caller that frees the copy after the forward and remakes it for the
  // backward (the MLP's activation, recomputed from its input).
  void share_saved_input(const Tensor& saved);
  // Whether forward_with_saved_input can share a narrow copy of dtype `dtype`.
  bool can_share_saved_input(DType dtype) const {
    return low_precision() && prec_->mode() != PrecisionMode::FP8 && prec_->saved_dtype() == dtype;
  }
  // dy [N, O] -> dx [N, I] written (or added to, when accumulate_dx). dW, db accumulated.
  // before_weight_grad (or empty) runs once dx is made and before dW's product reads the saved input:
  // a caller that remakes that input can do it there, in a pass that also needs dx (the MLP's remade
  // activation and the activation's gradient, from one read of fc1's output).
  void backward(const Tensor& dy, Tensor& dx, bool accumulate_dx,
                const std::function<void()>& before_weight_grad = nullptr);
  // The same from dy already rounded to bf16 (the caller made it so, in the pass that computed it), when
  // takes_bf16_dy(): bf16 products, column-parallel. With a bias, the caller has also added dy's column
  // sums to bias_grad() in that pass. The bits of backward() on the fp32 dy.
  bool takes_bf16_dy() const { return prec_ && prec_->bf16_gemm() && mode_ == LinearParallel::Column; }
  void backward_bf16_dy(const uint16_t* dy_bf16, int64_t N, Tensor& dx, bool accumulate_dx);
  // The bias [O] and its gradient (this rank's shard), or null without a bias.
  const float* bias_values() const { return b_ >= 0 ? store_->value(b_).data<float>() : nullptr; }
  float* bias_grad() const { return b_ >= 0 ? store_->grad(b_).data<float>() : nullptr; }

  // This rank's sizes (local shards under tensor parallelism).
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // Column-parallel: the caller maps the input itself (q, k, v share one all-gather of their input
  // and one reduction of their summed input gradients): forward takes x as given (all rows), and
  // backward leaves dx as this rank's partial sum over the tp ranks.
  void set_input_mapped_by_caller() { caller_maps_input_ = true; }
  int weight_id() const { return w_; }
  // The mixed-precision policy of the products (null = fp32). Set once, before the first forward.
  void set_precision(MixedPrecision* p) { prec_ = p; }

 private:
  ParamStore* store_ = nullptr;
  const ParallelContext* ctx_ = nullptr;
  LinearParallel mode_ = LinearParallel::Column;
  bool caller_maps_input_ = false;
  int64_t in_ = 0, out_ = 0;
  int w_ = -1, b_ = -1;
  MixedPrecision* prec_ = nullptr;
  struct DxTarget {
    Tensor dx;     // where the product writes: dx_in, or a staging buffer to be reduced into it
    bool reduce;   // the staging buffer's partial sums go through reduce_rows
    float beta;    // 1 when the product adds to dx_in
  };
  DxTarget dx_target(int64_t N, Tensor& dx_in, bool accumulate_dx) const;
  void products_bf16_dy(const Backend& be, const uint16_t* dyb, int64_t N, Tensor& dx_in, bool accumulate_dx,
                        const std::function<void()>& before_weight_grad = nullptr);
  void backward_fp8(const Backend& be, const Tensor& dy, int64_t N, Tensor& dx_in, bool accumulate_dx,
                    const std::function<void()>& before_weight_grad);
  Tensor saved_x_;           // [N, I]: fp32 view, or bf16 / fp16 bits, or e4m3 bytes
  float saved_scale_ = 1.0f;  // fp8: the scale saved_x_ was quantised with

  bool low_precision() const { return prec_ && prec_->mode() != PrecisionMode::FP32; }
  // first: share its saved input; saved: share this narrow copy; out: write y there (else the arena);
  // add_bias false: leave the bias to the caller; keep_input false: save no copy (forward_unsaved).
  Tensor forward_impl(Arena& arena, const Tensor& x, const Linear* first, const Tensor* saved, Tensor* out,
                      bool add_bias = true, bool keep_input = true);
  Tensor bias_and_reduce(Arena& arena, Tensor& y, bool add_bias);
};

}  // namespace megadlm
