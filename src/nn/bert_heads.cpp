#include "nn/bert_heads.h"

#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "nn/gelu_exact.h"
#include "nn/vocab_gather.h"
#include "nn/vocab_parallel_cross_entropy.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

namespace {

// The host-side arrays of these heads (labels, the GELU and tanh loops) need the parameters on the CPU.
void check_cpu(const ParamStore& store, const char* who) {
  MEGADLM_CHECK(store.device() == Device::CPU, who, " runs on the CPU only (the BERT family: docs/bert.md)");
}

void check_labels(const int32_t* labels, int64_t n, int64_t classes, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    MEGADLM_CHECK(labels[i] == kMlmIgnore || (labels[i] >= 0 && labels[i] < classes), what, " label ", labels[i],
                  " at row ", i, " is outside [0, ", classes, ") and not ", kMlmIgnore, " (no loss)");
}

// The context of the replicated layers (dense, pooler, binary head): one rank's, whatever the layout,
// so that they are whole on every tp rank.
const ParallelContext& replicated() {
  static const ParallelContext single = ParallelContext::single();
  return single;
}

// The first of x's rows among the batch's N: this rank's first under sequence parallelism, else 0.
int64_t first_local_row(const ParallelContext& ctx, int64_t N) {
  return sequence_parallel(ctx) ? ctx.tp.rank * (N / ctx.tp.size) : 0;
}

// The softmax cross-entropy of logits [n, classes] in place: returns sum_i w_i CE_i, and with
// backward leaves dlogits (scaled by grad_scale) in `logits`.
double cross_entropy(const Backend& be, Tensor& logits, const int32_t* labels, const float* weights,
                     float grad_scale, bool backward, int64_t n, int64_t classes) {
  CrossEntropyArgs a;
  a.logits = logits.data<float>();
  a.dlogits = backward ? logits.data<float>() : nullptr;
  a.targets = labels;
  a.weights = weights;
  a.ignore_index = kMlmIgnore;
  a.grad_scale = grad_scale;
  a.N = n;
  a.Vl = classes;
  a.V = classes;
  return be.cross_entropy(a);
}

}  // namespace

MLMHead::MLMHead(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg, int word_embeddings_id,
                 bool exact_gelu)
    : store_(&store), ctx_(&ctx), V_(cfg.vocab_size), C_(cfg.hidden_size), exact_gelu_(exact_gelu),
      w_(word_embeddings_id) {
  MEGADLM_CHECK(w_ >= 0, "the MLM head's decoder is tied to the word embeddings: give their parameter");
  const RowRange cols = balanced_rows(V_, ctx.tp.size, ctx.tp.rank);
  vocab_start_ = cols.begin;
  V_local_ = cols.size;
  MEGADLM_CHECK(store.info(w_).shape == Shape({V_local_, C_}), "the MLM head's tied decoder ", store.info(w_).name,
                " is not this rank's shard of the word embeddings [", V_local_, ", ", C_, "]");
  dense_ = Linear(store, replicated(), "mlm_head.dense", C_, C_, true, cfg.init_method_std);
  norm_ = Norm(store, "mlm_head.norm", NormKind::LayerNorm, C_, cfg.norm_epsilon, true);
  b_ = store.add_balanced_shard("mlm_head.bias", {V_}, 0, ctx.tp.size, ctx.tp.rank, Init::Zeros, 0.0f, false);
  decoder_ = OutputProducts(store, w_);
}

Tensor MLMHead::transform(Arena& arena, const Tensor& x) {
  check_cpu(*store_, "the MLM head");
  h_ = dense_.forward(arena, x);
  Tensor a = arena.tensor(h_.shape());
  if (exact_gelu_) gelu_exact_forward(a, h_);
  else backend_of(h_).gelu_forward(a.data<float>(), h_.data<float>(), h_.numel());
  t_ = norm_.forward(arena, a);
  return t_;
}

Tensor MLMHead::shard_logits(Arena& arena, const Tensor& t) {
  const int64_t n = t.size(0);
  const Backend& be = backend_of(t);
  Tensor out = arena.tensor({n, V_local_});
  decoder_.logits(arena, t, out);
  be.bias_add_forward(out.data<float>(), store_->value(b_).data<float>(), n, V_local_);
  return out;
}

Tensor MLMHead::logits(Arena& arena, const Tensor& x) {
  const Tensor t = transform(arena, gather_rows(arena, *ctx_, x));
  return gather_vocab_shards(arena, *ctx_, shard_logits(arena, t), V_);
}

double MLMHead::loss(Arena& arena, const Tensor& x_local, const int32_t* labels, const float* weights,
                     float grad_scale, Tensor* dx) {
  const Tensor x = gather_rows(arena, *ctx_, x_local);  // [N, C]: every row
  const int64_t N = x.size(0);
  check_labels(labels, N, V_, "MLM");
  const Backend& be = backend_of(x);
  // Only the labelled rows (BERT masks about 15%) go through the transform and the decoder: the others'
  // logits would carry no loss and give no gradient.
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < N; ++i)
    if (labels[i] != kMlmIgnore) rows.push_back(i);
  const auto n = static_cast<int64_t>(rows.size());
  if (dx) dx->zero_();  // the unlabelled rows' gradient
  if (n == 0) return 0.0;
  Tensor xs = arena.tensor({n, C_});
  std::vector<int32_t> ls(static_cast<size_t>(n));
  std::vector<float> ws(weights ? static_cast<size_t>(n) : 0);
  for (int64_t k = 0; k < n; ++k) {
    be.copy(xs.data<float>() + k * C_, x.data<float>() + rows[k] * C_, sizeof(float) * static_cast<size_t>(C_));
    ls[k] = labels[rows[k]];
    if (weights) ws[k] = weights[rows[k]];
  }
  transform(arena, xs);
  Tensor lg = shard_logits(arena, t_);
  CrossEntropyArgs a;
  a.logits = lg.data<float>();
  a.dlogits = dx ? lg.data<float>() : nullptr;
  a.targets = ls.data();
  a.weights = weights ? ws.data() : nullptr;
  a.ignore_index = kMlmIgnore;
  a.grad_scale = grad_scale;
  a.N = n;
  a.Vl = V_local_;
  a.vocab_start = vocab_start_;
  a.V = V_;
  const double loss = vocab_parallel_cross_entropy(be, arena, *ctx_, a);
  if (dx == nullptr) return loss;
  const Tensor& dl = lg;  // dlogits [n, Vl]
  // The output bias and the tied matrix: dE [Vl, C] += dlogits^T t, added to what the embedding adds;
  // dt = dlogits E: this rank's columns' part, summed over tp; the replicated layers below then agree
  // on every rank.
  be.bias_backward(store_->grad(b_).data<float>(), dl.data<float>(), n, V_local_);
  Tensor dt = arena.tensor({n, C_});
  decoder_.backward(arena, t_, dl, dt);
  tp_all_reduce_sum(*ctx_, dt.data<float>(), n * C_, be.device());
  Tensor da = arena.tensor({n, C_});
  norm_.backward(dt, da);
  // GELU's gradient in place of da's values (each element read before it is written).
  if (exact_gelu_) gelu_exact_backward(da, h_, da);
  else be.gelu_backward(da.data<float>(), h_.data<float>(), da.data<float>(), n * C_);
  Tensor dxs = arena.tensor({n, C_});
  dense_.backward(da, dxs, false);
  // The labelled rows among x's own (this rank's under sequence parallelism).
  const int64_t first = first_local_row(*ctx_, N), local = dx->size(0);
  for (int64_t k = 0; k < n; ++k)
    if (rows[k] >= first && rows[k] < first + local)
      be.copy(dx->data<float>() + (rows[k] - first) * C_, dxs.data<float>() + k * C_,
              sizeof(float) * static_cast<size_t>(C_));
  return loss;
}

PoolerBinaryHead::PoolerBinaryHead(ParamStore& store, const ParallelContext& ctx, const TransformerConfig& cfg)
    : ctx_(&ctx), C_(cfg.hidden_size) {
  dense_ = Linear(store, replicated(), "pooler.dense", C_, C_, true, cfg.init_method_std);
  binary_ = Linear(store, replicated(), "binary_head", C_, 2, true, cfg.init_method_std);
}

Tensor PoolerBinaryHead::pooled(Arena& arena, const Tensor& x_local, int64_t B, int64_t T) {
  MEGADLM_CHECK(x_local.device() == Device::CPU, "the pooler runs on the CPU only (the BERT family: docs/bert.md)");
  const Tensor x = gather_rows(arena, *ctx_, x_local);  // [B*T, C]: every row
  MEGADLM_CHECK(x.size(0) == B * T, "pooler: ", x.size(0), " rows are not ", B, " sequences of ", T);
  const Backend& be = backend_of(x);
  Tensor first = arena.tensor({B, C_});
  for (int64_t b = 0; b < B; ++b)
    be.copy(first.data<float>() + b * C_, x.data<float>() + b * T * C_, sizeof(float) * static_cast<size_t>(C_));
  pooled_ = dense_.forward(arena, first);
  float* p = pooled_.data<float>();
  for (int64_t i = 0; i < B * C_; ++i) p[i] = std::tanh(p[i]);
  return pooled_;
}

Tensor PoolerBinaryHead::logits(Arena& arena, const Tensor& x, int64_t B, int64_t T) {
  return binary_.forward(arena, pooled(arena, x, B, T));
}

double PoolerBinaryHead::loss(Arena& arena, const Tensor& x, int64_t B, int64_t T, const int32_t* labels,
                              float grad_scale, Tensor* dx) {
  check_labels(labels, B, 2, "binary");
  Tensor lg = logits(arena, x, B, T);
  const Backend& be = backend_of(lg);
  const double loss = cross_entropy(be, lg, labels, nullptr, grad_scale, dx != nullptr, B, 2);
  if (dx == nullptr) return loss;
  Tensor dpooled = arena.tensor({B, C_});
  binary_.backward(lg, dpooled, false);
  // tanh' = 1 - tanh^2, from the saved output.
  float* d = dpooled.data<float>();
  const float* p = pooled_.data<float>();
  for (int64_t i = 0; i < B * C_; ++i) d[i] *= 1.0f - p[i] * p[i];
  Tensor dfirst = arena.tensor({B, C_});
  dense_.backward(dpooled, dfirst, false);
  // The first rows among x's own (this rank's under sequence parallelism).
  const int64_t first = first_local_row(*ctx_, B * T), local = dx->size(0);
  for (int64_t b = 0; b < B; ++b)
    if (b * T >= first && b * T < first + local)
      be.add_inplace(dx->data<float>() + (b * T - first) * C_, dfirst.data<float>() + b * C_, C_);
  return loss;
}

}  // namespace megadlm
