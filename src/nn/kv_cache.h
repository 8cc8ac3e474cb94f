#pragma once
// Per-layer key/value cache for inference (autoregressive decoding, diffusion prefix caching).
// Each layer holds k, v [B, S, K*D]: the rotated (and QK-normed) keys and the values of every row a
// cached forward has written. The cache has no notion of "length": the caller says at which row each
// sequence's new tokens go (offsets), which lets the diffusion sampler rewrite the rows of the current
// block at every step while the prefix rows stay.
// Legend: B batch, S capacity (rows per sequence), K kv heads, D head dim.
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megadlm {

struct KVCache {
  int64_t B = 0, S = 0, KD = 0;
  Device device = Device::CPU;  // the model's: the cache lives where its layers run
  std::vector<Tensor> k, v;     // per layer [B, S, K*D]

  void allocate(int64_t num_layers, int64_t batch, int64_t capacity, int64_t kv_width, Device on = Device::CPU) {
    if (B == batch && S == capacity && KD == kv_width && device == on && static_cast<int64_t>(k.size()) == num_layers)
      return;
    B = batch;
    S = capacity;
    KD = kv_width;
    device = on;
    k.clear();
    v.clear();
    for (int64_t l = 0; l < num_layers; ++l) {
      k.push_back(Tensor::zeros({B, S, KD}, DType::F32, device));
      v.push_back(Tensor::zeros({B, S, KD}, DType::F32, device));
    }
  }
  // Where sequence `b` of layer `l` starts.
  float* k_at(int64_t l, int64_t b) { return k[static_cast<size_t>(l)].data<float>() + b * S * KD; }
  float* v_at(int64_t l, int64_t b) { return v[static_cast<size_t>(l)].data<float>() + b * S * KD; }
};

}  // namespace megadlm
