#pragma once
// The three matrix products of an output layer whose matrix is a parameter W [Vl, C] (BERT's tied MLM
// decoder, T5's output matrix), over rows x [n, C]:
//   logits [n, Vl] = x W^T        dx [n, C] = dlogits W        dW [Vl, C] += dlogits^T x
// In fp32, or under --bf16 with bf16 products (nn/precision.h) as LMHead's output layer makes them:
// x, W (the policy's copy, made once per optimizer step) and dlogits in bf16, fp32 accumulation, the
// logits fp32 (the softmax and the cross-entropy stay fp32). Under bf16 storage only, fp16 and fp8 the
// products stay fp32, as LMHead's. The bf16 copies of x and dlogits are made in the arena, freed by the
// caller's next reset.
// Legend: n rows, C hidden, Vl this rank's rows of the output matrix.
#include "core/arena.h"
#include "core/parameters.h"
#include "nn/precision.h"

namespace megadlm {

class OutputProducts {
 public:
  OutputProducts() = default;
  // w: the output matrix's parameter id in store.
  OutputProducts(ParamStore& store, int w) : store_(&store), w_(w) {}
  // The policy of the products (null = fp32); only bf16 products change them.
  void set_precision(MixedPrecision* p) { prec_ = p && p->bf16_gemm() ? p : nullptr; }

  // x [n, C] -> logits [n, Vl] written.
  void logits(Arena& arena, const Tensor& x, Tensor& logits) const;
  // dlogits [n, Vl], the forward's x [n, C] -> dx [n, C] written; dW accumulated (the gradient is marked
  // written: a tied matrix's other user adds to it).
  void backward(Arena& arena, const Tensor& x, const Tensor& dlogits, Tensor& dx) const;

 private:
  ParamStore* store_ = nullptr;
  int w_ = -1;
  MixedPrecision* prec_ = nullptr;
};

}  // namespace megadlm
