#include "nn/lm_head.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "kernels/backend.h"
#include "nn/vocab_gather.h"
#include "nn/vocab_parallel_cross_entropy.h"
#include "parallel/tp_mappings.h"

namespace megadlm {

int64_t logits_chunk_bytes() {
  static const int64_t bytes = [] {
    const char* env = std::getenv("MEGADLM_LOGITS_CHUNK_MB");
    if (env == nullptr || *env == '\0') return int64_t{64} << 20;
    char* end = nullptr;
    const double mb = std::strtod(env, &end);
    MEGADLM_CHECK(end != env && *end == '\0' && mb > 0, "MEGADLM_LOGITS_CHUNK_MB: expected a positive number of MiB, got '",
                  env, "'");
    return static_cast<int64_t>(mb * (1 << 20));
  }();
  return bytes;
}

int64_t logits_chunk_rows(int64_t N, int64_t Vl, int bytes_per_logit, int64_t max_rows) {
  int64_t rows = std::max<int64_t>(64, logits_chunk_bytes() / (bytes_per_logit * std::max<int64_t>(Vl, 1)));
  if (max_rows > 0) rows = std::min(rows, max_rows);
  rows = std::max<int64_t>(1, std::min(N, rows));
  // As many chunks as that takes, of equal size: a short last chunk runs the three products far below
  // their speed (docs/bench/decisions.md).
  int64_t chunks = std::max<int64_t>(1, (N + rows - 1) / rows);  // N = 0 (no loss rows): one, empty
  // Fewer, larger chunks while the equal split falls below kMinChunkRows and a chunk stays within twice
  // the budget: oneDNN's sgemm takes a slower path for a product of 256 rows or fewer, at least on AVX2
  // (docs/bench/decisions.md). Not under a caller's cap.
  auto split = [N](int64_t c) { return (N + c - 1) / c; };
  while (max_rows <= 0 && chunks > 1 && split(chunks) < kMinChunkRows && split(chunks - 1) <= 2 * rows) --chunks;
  return std::max<int64_t>(1, split(chunks));
}

// per_token_loss [N] (host) = losses [N] (on the device of `be`).
static void losses_to_host(const Backend& be, float* per_token_loss, const float* losses, int64_t N) {
  if (be.device() == Device::CPU) std::copy(losses, losses + N, per_token_loss);
  else be.copy_to_host(per_token_loss, losses, sizeof(float) * static_cast<size_t>(N));
}

static const ParallelContext& single_context() {
  static const ParallelContext ctx;
  return ctx;
}

// Whether row i carries a loss: a target that is not ignored and a non-zero weight (weights null = 1).
static bool carries_loss(const int32_t* targets, const float* weights, int64_t i) {
  return targets[i] != kIgnoreIndex && (weights == nullptr || weights[i] != 0.0f);
}

// The rows of x [N, C] that carry a loss (target != kIgnoreIndex and weight != 0), copied together in order:
// x [n, C], their targets and weights [n], and index [n] = their row in x. All from the arena.
LMHead::LossRows LMHead::loss_rows(Arena& arena, const Tensor& x, const int32_t* targets, const float* weights) const {
  const int64_t N = x.numel() / C_;
  LossRows r;
  r.index = static_cast<int32_t*>(arena.allocate(sizeof(int32_t) * static_cast<size_t>(N)));
  for (int64_t i = 0; i < N; ++i)
    if (carries_loss(targets, weights, i)) r.index[r.n++] = static_cast<int32_t>(i);
  if (r.n == 0 || r.n == N) return r;
  int32_t* kept_targets = static_cast<int32_t*>(arena.allocate(sizeof(int32_t) * static_cast<size_t>(r.n)));
  float* kept_weights = static_cast<float*>(arena.allocate(sizeof(float) * static_cast<size_t>(r.n)));
  r.x = arena.tensor({r.n, C_});
  const float* src = x.data<float>();
  float* dst = r.x.data<float>();
#pragma omp parallel for schedule(static) if (r.n * C_ >= (1 << 16))
  for (int64_t k = 0; k < r.n; ++k) {
    const int64_t i = r.index[k];
    std::copy(src + i * C_, src + (i + 1) * C_, dst + k * C_);
    kept_targets[k] = targets[i];
    kept_weights[k] = weights ? weights[i] : 1.0f;
  }
  r.targets = kept_targets;
  r.weights = kept_weights;
  return r;
}

// The same selection on a device: made on the host from the host copies of the labels
// (set_host_labels), uploaded, and the kept rows gathered on the device.
LMHead::LossRows LMHead::device_loss_rows(Arena& arena, const Backend& be, const Tensor& x) const {
  const int64_t N = x.numel() / C_;
  LossRows r;
  if (host_targets_ == nullptr) return r;  // no host labels: every row goes through
  std::vector<int32_t> targets, offsets(static_cast<size_t>(N) + 1, 0);
  std::vector<float> weights;
  for (int64_t i = 0; i < N; ++i) {
    const bool keep = carries_loss(host_targets_, host_weights_, i);
    offsets[i + 1] = offsets[i] + (keep ? 1 : 0);
    if (!keep) continue;
    r.host_index.push_back(static_cast<int32_t>(i));
    targets.push_back(host_targets_[i]);
    weights.push_back(host_weights_ ? host_weights_[i] : 1.0f);
  }
  r.n = static_cast<int64_t>(r.host_index.size());
  if (r.n == 0 || r.n == N) return r;
  auto upload = [&](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    const size_t bytes = sizeof(T) * v.size();
    T* p = static_cast<T*>(arena.allocate(bytes));
    be.copy_to_device(p, v.data(), bytes);
    return p;
  };
  std::vector<int32_t> order(static_cast<size_t>(r.n));
  for (int64_t k = 0; k < r.n; ++k) order[k] = static_cast<int32_t>(k);
  r.index = upload(r.host_index);
  r.targets = upload(targets);
  r.weights = upload(weights);
  r.offsets = upload(offsets);
  r.order = upload(order);
  r.x = arena.tensor({r.n, C_});
  be.gather_rows(r.x.data<float>(), x.data<float>(), r.index, r.n, C_);
  return r;
}

// out [N_all, width] = rows [n, width] placed at rows index[k] (index null: the rows as they are),
// zeros elsewhere.
void LMHead::scatter_rows(float* out, const float* rows, const int32_t* index, int64_t n, int64_t N_all,
                          int64_t width) {
  if (index == nullptr) {
    std::copy(rows, rows + n * width, out);
    return;
  }
  std::fill(out, out + N_all * width, 0.0f);
#pragma omp parallel for schedule(static) if (n * width >= (1 << 16))
  for (int64_t k = 0; k < n; ++k) std::copy(rows + k * width, rows + (k + 1) * width, out + index[k] * width);
}

LMHead::LMHead(ParamStore& store, const TransformerConfig& cfg, int tied_weight_id, const ParallelContext* ctx)
    : store_(&store), ctx_(ctx ? ctx : &single_context()), V_(cfg.vocab_size), C_(cfg.hidden_size), w_(tied_weight_id) {
  const int tp = ctx_->tp.size;
  MEGADLM_CHECK(V_ >= tp, "the vocabulary size ", V_, " is smaller than --tensor-model-parallel-size ", tp,
                ": every rank needs a row");
  if (w_ < 0)
    w_ = store.add_balanced_shard("lm_head.weight", {V_, C_}, 0, tp, ctx_->tp.rank, Init::Normal, cfg.init_method_std,
                                  true);
  const ParamInfo& p = store.info(w_);
  const RowRange rows = balanced_rows(V_, tp, ctx_->tp.rank);
  MEGADLM_CHECK(p.shape[0] == rows.size && p.shard_begin == rows.begin && p.shape[1] == C_, "output layer: weight '",
                p.name, "' has shape ", p.shape.str(), " from row ", p.shard_begin, ", expected this rank's [",
                rows.size, ", ", C_, "] from row ", rows.begin);
  vocab_start_ = rows.begin;
  V_local_ = rows.size;
  const int64_t real = cfg.real_vocab_size > 0 ? std::min(cfg.real_vocab_size, V_) : V_;
  token_cols_ = std::clamp<int64_t>(real - vocab_start_, 0, V_local_);
}

// The padded vocabulary rows' logits, columns [token_cols_, V_local_) of n rows of this rank's logits,
// set to -inf: their exponential is 0, so the softmax, the loss and its gradient (0 on those columns)
// are those of the tokens alone, and a sampler never draws them. The padded columns end a row, so the
// device's one-pass softmax (a running max and sum per thread, cuda/cross_entropy.cu) meets them only
// after a finite maximum, or only them (a thread whose sum is then left out).
void LMHead::mask_padding(void* logits, bool bf16, int64_t n) {
  if (token_cols_ == V_local_ || n == 0) return;
  const Backend& be = backend_for(store_->device());
  if (be.device() == Device::CPU) {
    constexpr uint16_t kBf16MinusInf = 0xFF80;
#pragma omp parallel for schedule(static) if (n * (V_local_ - token_cols_) >= (1 << 16))
    for (int64_t r = 0; r < n; ++r) {
      if (bf16)
        std::fill_n(static_cast<uint16_t*>(logits) + r * V_local_ + token_cols_, V_local_ - token_cols_, kBf16MinusInf);
      else
        std::fill_n(static_cast<float*>(logits) + r * V_local_ + token_cols_, V_local_ - token_cols_, -INFINITY);
    }
    return;
  }
  // A device keeps fp32 logits: a bias of 0 on the token columns and -inf on the padded ones.
  MEGADLM_CHECK(!bf16, "output layer: bf16 logits on a device");
  if (padding_bias_.raw() == nullptr) {
    std::vector<float> bias(static_cast<size_t>(V_local_), 0.0f);
    std::fill(bias.begin() + token_cols_, bias.end(), -INFINITY);
    padding_bias_ = Tensor::empty({V_local_}, DType::F32, be.device());
    be.copy_to_device(padding_bias_.raw(), bias.data(), sizeof(float) * bias.size());
  }
  be.bias_add_forward(static_cast<float*>(logits), padding_bias_.data<float>(), n, V_local_);
}

Tensor LMHead::logits(Arena& arena, const Tensor& x_local) {
  return shard_logits(arena, gather_rows(arena, *ctx_, x_local));
}

Tensor LMHead::shard_logits(Arena& arena, const Tensor& x) {
  const int64_t N = x.numel() / C_;
  Tensor out = arena.tensor({N, V_local_});
  backend_of(x).gemm(false, true, N, V_local_, C_, 1.0f, x.data<float>(), C_, store_->value(w_).data<float>(), C_, 0.0f,
            out.data<float>(), V_local_);
  mask_padding(out.raw(), false, N);
  return out;
}

Tensor LMHead::full_logits(Arena& arena, const Tensor& x) {
  return gather_vocab_shards(arena, *ctx_, logits(arena, x), V_);
}

bool LMHead::bf16_logits(const Backend& be) const { return prec_ != nullptr && be.bf16_logits(); }

int64_t logits_slab_cols(int64_t Vl) { return std::min<int64_t>(Vl, 4096); }

// The bf16 logits of a chunk of n rows, through fp32 vocabulary slabs in scratch [rows, slab] where the
// backend finds that the faster way (Backend::gemm_bf16_to_bf16).
static void bf16_chunk_logits(const Backend& be, uint16_t* lgb, const uint16_t* xb, const uint16_t* Wb, float* scratch,
                              int64_t n, int64_t Vl, int64_t C) {
  be.gemm_bf16_to_bf16(false, true, n, Vl, C, 1.0f, xb, C, Wb, C, lgb, Vl, scratch, logits_slab_cols(Vl));
}

// The cross-entropy of a chunk of n rows of this rank's logits [n, Vl] (fp32, or bf16 bits).
CrossEntropyArgs LMHead::chunk_loss(const void* logits, bool logits_bf16, float* losses, const int32_t* targets,
                                    const float* weights, float grad_scale, int64_t n) const {
  CrossEntropyArgs a;
  a.logits = logits;
  a.logits_bf16 = logits_bf16;
  a.losses = losses;
  a.targets = targets;
  a.weights = weights;
  a.ignore_index = kIgnoreIndex;
  a.grad_scale = grad_scale;
  a.N = n;
  a.Vl = V_local_;
  a.vocab_start = vocab_start_;
  a.V = V_;
  return a;
}

int LMHead::bytes_per_logit(const Backend& be) const { return bf16_logits(be) ? 2 : prec_ ? 6 : 4; }

void LMHead::chunk_logits(float* logits, const float* x, const uint16_t* xb, const uint16_t* Wb, int64_t n) {
  const Backend& be = backend_for(store_->device());
  if (xb) {
    be.gemm_bf16(false, true, n, V_local_, C_, 1.0f, xb, C_, Wb, C_, 0.0f, logits, V_local_);
  } else {
    be.gemm(false, true, n, V_local_, C_, 1.0f, x, C_, store_->value(w_).data<float>(), C_, 0.0f, logits, V_local_);
  }
}

// x [N, C] in bf16 (arena) under the bf16 policy; null otherwise.
static const uint16_t* bf16_rows(Arena& arena, const Tensor& x, bool bf16) {
  if (!bf16) return nullptr;
  Tensor xb = arena.tensor(x.shape(), DType::BF16);
  backend_of(x).cast_f32_to_bf16(static_cast<uint16_t*>(xb.raw()), x.data<float>(), x.numel());
  return static_cast<const uint16_t*>(xb.raw());
}

// The rows the output layer runs on. Rows without a loss (target kIgnoreIndex or weight 0: the unmasked tokens
// of a diffusion batch, about half of them) have zero loss and zero gradient, so both the forward-only
// loss and the training loss run on the other rows only: the [N,V] products and the cross-entropy
// shrink by that share, and the two paths multiply the same rows in the same shapes, so they give the
// same bits (a GEMM's summation order may depend on its shape). Every tp rank holds the same targets,
// so every rank keeps the same rows. On a device the selection is made from the host copies of the
// labels (set_host_labels); without them every row goes through.
LMHead::LossRows LMHead::select_loss_rows(Arena& arena, const Backend& be, const Tensor& x_all, const int32_t* targets,
                                          const float* weights) const {
  LossRows kept =
      be.device() == Device::CPU ? loss_rows(arena, x_all, targets, weights) : device_loss_rows(arena, be, x_all);
  kept.N_all = x_all.numel() / C_;
  kept.compact = kept.n > 0 && kept.n < kept.N_all;
  if (kept.compact) return kept;
  kept.n = kept.N_all;  // every row (or none carries a loss: all go through, and give zeros)
  kept.x = x_all;
  kept.targets = targets;
  kept.weights = weights;
  return kept;
}

// per_token_loss [N_all] (host) from the kept rows' losses [n] (on the device of `be`): zero on the rows
// that carry no loss.
void LMHead::write_per_token_losses(const Backend& be, const LossRows& kept, const float* losses,
                                    float* per_token_loss) {
  if (!kept.compact) {
    losses_to_host(be, per_token_loss, losses, kept.n);
  } else if (be.device() == Device::CPU) {
    scatter_rows(per_token_loss, losses, kept.index, kept.n, kept.N_all, 1);
  } else {
    std::vector<float> kept_losses(static_cast<size_t>(kept.n));
    losses_to_host(be, kept_losses.data(), losses, kept.n);
    scatter_rows(per_token_loss, kept_losses.data(), kept.host_index.data(), kept.n, kept.N_all, 1);
  }
}

double LMHead::loss(Arena& arena, const Tensor& x_local, const int32_t* targets_all, const float* weights_all,
                    float* per_token_loss) {
  const size_t mark = arena.mark();
  const Tensor x_all = gather_rows(arena, *ctx_, x_local);
  const Backend& be = backend_of(x_all);
  const LossRows kept = select_loss_rows(arena, be, x_all, targets_all, weights_all);
  const Tensor& x = kept.x;
  const int64_t N = kept.n;
  const bool b16 = bf16_logits(be);
  const int64_t rows = logits_chunk_rows(N, V_local_, bytes_per_logit(be), max_chunk_rows_);
  Tensor lg = arena.tensor({rows, V_local_}, b16 ? DType::BF16 : DType::F32);
  Tensor slab = b16 ? arena.tensor({rows, logits_slab_cols(V_local_)}) : Tensor();
  Tensor losses = arena.tensor({N});
  const uint16_t* xb = bf16_rows(arena, x, prec_ != nullptr);
  const uint16_t* Wb = prec_ ? prec_->weight_bf16(w_) : nullptr;
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    const int32_t* t = kept.targets + r0;
    const float* w = kept.weights ? kept.weights + r0 : nullptr;
    if (b16) bf16_chunk_logits(be, static_cast<uint16_t*>(lg.raw()), xb + r0 * C_, Wb, slab.data<float>(), n, V_local_, C_);
    else chunk_logits(lg.data<float>(), x.data<float>() + r0 * C_, xb ? xb + r0 * C_ : nullptr, Wb, n);
    mask_padding(lg.raw(), b16, n);
    total += vocab_parallel_cross_entropy(be, arena, *ctx_, chunk_loss(lg.raw(), b16, losses.data<float>() + r0, t, w,
                                                                        1.0f, n));
  }
  if (per_token_loss) write_per_token_losses(be, kept, losses.data<float>(), per_token_loss);
  arena.release(mark);
  return total;
}

double LMHead::loss_and_backward(Arena& arena, const Tensor& x_local, const int32_t* targets, const float* weights,
                                 float grad_scale, Tensor& dx, float* per_token_loss) {
  const size_t mark = arena.mark();
  const Tensor x_all = gather_rows(arena, *ctx_, x_local);  // all N rows
  const int64_t N_all = x_all.numel() / C_;
  const Backend& be = backend_of(x_all);
  const LossRows kept = select_loss_rows(arena, be, x_all, targets, weights);
  const bool compact = kept.compact;
  const Tensor& x = kept.x;
  const int64_t N = kept.n;
  targets = kept.targets, weights = kept.weights;
  const bool b16 = bf16_logits(be);
  const int64_t rows = logits_chunk_rows(N, V_local_, bytes_per_logit(be), max_chunk_rows_);
  Tensor lg = arena.tensor({rows, V_local_}, b16 ? DType::BF16 : DType::F32);
  Tensor slab = b16 ? arena.tensor({rows, logits_slab_cols(V_local_)}) : Tensor();
  Tensor losses = arena.tensor({N});
  // dx [N, C] = dlogits [N, Vl] @ W [Vl, C]: this rank's share, summed over tp (all rows, or this
  // rank's rows under sequence parallelism).
  const bool reduce = ctx_->tp.size > 1;
  Tensor dxp = reduce ? arena.tensor({N_all, C_}) : dx;
  Tensor dxk = compact ? arena.tensor({N, C_}) : dxp;
  // The first chunk of the step's first micro-batch writes dW over its zeros, the others add to it
  // (ParamStore::grad_beta): 77 MB not read at gpt2's vocabulary and C 384.
  float* dW = store_->grad(w_).data<float>();
  const uint16_t* xb = bf16_rows(arena, x, prec_ != nullptr);
  const uint16_t* Wb = prec_ ? prec_->weight_bf16(w_) : nullptr;
  // Under the bf16 policy on the CPU the logits are bf16 and dlogits replace them in place (2 bytes a
  // logit, 3x the rows of an fp32 chunk with a bf16 copy: the weight gradient's reduction over a chunk's
  // rows is the product that gains); a device makes fp32 logits and a bf16 copy of dlogits (gb).
  uint16_t* gb = b16 ? static_cast<uint16_t*>(lg.raw())
                     : prec_ ? static_cast<uint16_t*>(arena.tensor({rows, V_local_}, DType::BF16).raw())
                             : nullptr;
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    const float* xr = x.data<float>() + r0 * C_;
    const int32_t* t = targets + r0;
    const float* w = weights ? weights + r0 : nullptr;
    CrossEntropyArgs a = chunk_loss(lg.raw(), b16, losses.data<float>() + r0, t, w, grad_scale, n);
    if (b16) {
      bf16_chunk_logits(be, gb, xb + r0 * C_, Wb, slab.data<float>(), n, V_local_, C_);
      mask_padding(gb, true, n);
      a.dlogits_bf16 = gb;  // in place
    } else {
      float* logits = lg.data<float>();  // [n, Vl], then dlogits in place
      chunk_logits(logits, xr, xb ? xb + r0 * C_ : nullptr, Wb, n);
      mask_padding(logits, false, n);
      a.dlogits = logits;
      a.dlogits_bf16 = gb;  // a bf16 copy of dlogits for the bf16 products, or null
    }
    total += vocab_parallel_cross_entropy(be, arena, *ctx_, a);
    float* dxr = dxk.data<float>() + r0 * C_;
    if (prec_) {
      // dx [n, C] = dlogits @ W;  dW [Vl, C] += dlogits^T @ x  (bf16 inputs, fp32 accumulation)
      be.gemm_bf16(false, false, n, C_, V_local_, 1.0f, gb, V_local_, Wb, C_, 0.0f, dxr, C_);
      be.gemm_bf16(true, false, V_local_, C_, n, 1.0f, gb, V_local_, xb + r0 * C_, C_, store_->grad_beta(w_), dW, C_);
    } else {
      const float* W = store_->value(w_).data<float>();
      const float* dlogits = lg.data<float>();
      be.gemm(false, false, n, C_, V_local_, 1.0f, dlogits, V_local_, W, C_, 0.0f, dxr, C_);
      be.gemm(true, false, V_local_, C_, n, 1.0f, dlogits, V_local_, xr, C_, store_->grad_beta(w_), dW, C_);
    }
  }
  if (per_token_loss) write_per_token_losses(be, kept, losses.data<float>(), per_token_loss);
  if (compact && be.device() == Device::CPU) scatter_rows(dxp.data<float>(), dxk.data<float>(), kept.index, N, N_all, C_);
  else if (compact) be.scatter_rows(dxp.data<float>(), dxk.data<float>(), kept.offsets, kept.order, N_all, C_);
  if (reduce) reduce_rows(*ctx_, dxp, dx, false);
  arena.release(mark);
  return total;
}

}  // namespace megadlm
