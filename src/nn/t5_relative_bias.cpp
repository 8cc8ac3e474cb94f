#include "nn/t5_relative_bias.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace megadlm {

int64_t t5_relative_position_bucket(int64_t relative, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0, n = num_buckets, d = 0;
  if (bidirectional) {
    n /= 2;
    if (relative > 0) bucket += n;
    d = std::llabs(relative);
  } else {
    d = relative > 0 ? 0 : -relative;
  }
  const int64_t max_exact = n / 2;
  if (d < max_exact) return bucket + d;
  // fp32 throughout, the divisor's logarithm in double rounded once: PyTorch's arithmetic on a float
  // tensor and a Python float.
  const float ratio = static_cast<float>(d) / static_cast<float>(max_exact);
  const auto span = static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = std::log(ratio) / span * static_cast<float>(n - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(scaled);
  return bucket + std::min(large, n - 1);
}

T5RelativeBias::T5RelativeBias(ParamStore& store, const ParallelContext& ctx, const std::string& name,
                               int64_t num_buckets, int64_t H, int64_t max_distance, bool bidirectional, float init_std)
    : store_(&store), buckets_(num_buckets), max_distance_(max_distance), bidirectional_(bidirectional) {
  MEGADLM_CHECK(H % ctx.tp.size == 0, name, ": ", H, " heads are not divisible by --tensor-model-parallel-size ",
                ctx.tp.size);
  H_ = H / ctx.tp.size;
  w_ = store.add_sharded(name + ".weight", {num_buckets, H}, 1, ctx.tp.size, ctx.tp.rank, Init::Normal, init_std,
                         /*weight_decay=*/false);
}

std::vector<int64_t> T5RelativeBias::buckets(int64_t i0, int64_t T, int64_t S) const {
  MEGADLM_CHECK(store_->device() == Device::CPU, "T5's relative position bias runs on the CPU only (docs/t5.md)");
  std::vector<int64_t> bucket(static_cast<size_t>(T * S));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j)
      bucket[i * S + j] = t5_relative_position_bucket(j - (i0 + i), bidirectional_, buckets_, max_distance_);
  return bucket;
}

Tensor T5RelativeBias::lookup(Arena& arena, const std::vector<int64_t>& bucket, int64_t T, int64_t S) const {
  const float* table = store_->value(w_).data<float>();
  Tensor bias = arena.tensor({H_, T, S});
  float* out = bias.data<float>();
  for (int64_t h = 0; h < H_; ++h)
    for (int64_t k = 0; k < T * S; ++k) out[h * T * S + k] = table[bucket[k] * H_ + h];
  return bias;
}

Tensor T5RelativeBias::forward(Arena& arena, int64_t T, int64_t S) {
  T_ = T;
  S_ = S;
  bucket_ = buckets(0, T, S);
  return lookup(arena, bucket_, T, S);
}

Tensor T5RelativeBias::query_row(Arena& arena, int64_t i, int64_t S) const {
  return lookup(arena, buckets(i, 1, S), 1, S);
}

void T5RelativeBias::backward(const Tensor& dbias) {
  MEGADLM_CHECK(dbias.numel() == H_ * T_ * S_, "T5RelativeBias::backward: dbias of ", dbias.numel(), " values for ",
                H_, " heads of ", T_, " x ", S_);
  store_->mark_grad_written(w_);
  float* g = store_->grad(w_).data<float>();
  const float* d = dbias.data<float>();
  for (int64_t h = 0; h < H_; ++h)
    for (int64_t k = 0; k < T_ * S_; ++k) g[bucket_[k] * H_ + h] += d[h * T_ * S_ + k];
}

}  // namespace megadlm
