#include "core/parameters.h"

#include <algorithm>

#include "core/device_memory.h"
#include "core/hash.h"
#include "core/philox.h"

namespace megadlm {

int ParamStore::add(const std::string& name, const Shape& shape, Init init, float std, bool weight_decay) {
  MEGADLM_CHECK(!finalized_, "parameter '", name, "' registered after the model was finalised");
  MEGADLM_CHECK(!by_name_.count(name), "parameter '", name, "' registered twice");
  ParamInfo p;
  p.name = name;
  p.shape = shape;
  p.offset = numel_;
  p.init = init;
  p.std = std;
  p.weight_decay = weight_decay;
  p.full_shape = shape;
  // Keep every parameter 64-byte aligned inside the flat buffer (16 floats).
  numel_ += (shape.numel() + 15) / 16 * 16;
  by_name_[name] = static_cast<int>(infos_.size());
  infos_.push_back(p);
  return static_cast<int>(infos_.size()) - 1;
}

RowRange balanced_rows(int64_t full, int parts, int part) {
  MEGADLM_CHECK(parts >= 1 && part >= 0 && part < parts, "balanced_rows: piece ", part, " of ", parts);
  const int64_t base = full / parts, extra = full % parts;
  RowRange r;
  r.begin = part * base + std::min<int64_t>(part, extra);
  r.size = base + (part < extra ? 1 : 0);
  return r;
}

int ParamStore::add_balanced_shard(const std::string& name, const Shape& full_shape, int split_dim, int parts,
                                   int part, Init init, float std, bool weight_decay) {
  if (parts == 1) return add(name, full_shape, init, std, weight_decay);
  MEGADLM_CHECK(split_dim >= 0 && split_dim < full_shape.n, "parameter '", name, "': split dimension ", split_dim,
                " outside a tensor of rank ", full_shape.n);
  const RowRange rows = balanced_rows(full_shape[split_dim], parts, part);
  MEGADLM_CHECK(rows.size > 0, "parameter '", name, "': dimension ", split_dim, " of size ", full_shape[split_dim],
                " leaves no rows for tensor-parallel rank ", part, " of ", parts);
  Shape local = full_shape;
  local[split_dim] = rows.size;
  const int id = add(name, local, init, std, weight_decay);
  ParamInfo& p = infos_[id];
  p.full_shape = full_shape;
  p.split_dim = split_dim;
  p.shard_begin = rows.begin;
  return id;
}

int ParamStore::add_sharded(const std::string& name, const Shape& full_shape, int split_dim, int parts, int part,
                            Init init, float std, bool weight_decay) {
  if (parts == 1) return add(name, full_shape, init, std, weight_decay);
  MEGADLM_CHECK(split_dim >= 0 && split_dim < full_shape.n, "parameter '", name, "': split dimension ", split_dim,
                " outside a tensor of rank ", full_shape.n);
  const int64_t full = full_shape[split_dim];
  MEGADLM_CHECK(full % parts == 0, "parameter '", name, "': dimension ", split_dim, " of size ", full,
                " is not divisible by the tensor-parallel size ", parts);
  return add_balanced_shard(name, full_shape, split_dim, parts, part, init, std, weight_decay);  // equal pieces
}

int64_t ParamInfo::global_index(int64_t i) const {
  if (split_dim < 0) return i;
  int64_t inner = 1;
  for (int d = split_dim + 1; d < shape.n; ++d) inner *= shape[d];
  const int64_t local = shape[split_dim];
  const int64_t in = i % inner;
  const int64_t l = (i / inner) % local;
  const int64_t outer = i / (inner * local);
  return (outer * full_shape[split_dim] + shard_begin + l) * inner + in;
}

void ParamStore::set_device(Device device) {
  MEGADLM_CHECK(!finalized_, "ParamStore::set_device after finalize");
  device_ = device;
}

void ParamStore::finalize() {
  MEGADLM_CHECK(!finalized_, "ParamStore finalised twice");
  values_ = Tensor::zeros({numel_}, DType::F32, device_);
  grads_ = Tensor::zeros({numel_}, DType::F32, device_);
  grad_unwritten_.assign(infos_.size(), uint8_t{1});
  finalized_ = true;
}

void ParamStore::copy_values_to_host(float* host) const {
  copy_bytes(host, Device::CPU, values_.raw(), device_, values_.nbytes());
}

void ParamStore::copy_values_from_host(const float* host) {
  copy_bytes(values_.raw(), device_, host, Device::CPU, values_.nbytes());
}

void ParamStore::copy_grads_to_host(float* host) const {
  copy_bytes(host, Device::CPU, grads_.raw(), device_, grads_.nbytes());
}

void ParamStore::init(uint64_t seed) {
  MEGADLM_CHECK(finalized_, "ParamStore::init before finalize");
  // Drawn on the host (a device's values are uploaded at the end), so that a seed gives the same
  // values on every device.
  Tensor host = device_ == Device::CPU ? values_ : Tensor::zeros({numel_}, DType::F32);
  const CounterRng rng(seed, RngPurpose::Init);
  for (const ParamInfo& p : infos_) {
    float* w = host.data<float>() + p.offset;
    const int64_t n = p.shape.numel();
    const uint64_t key = fnv1a64(p.name);
    switch (p.init) {
      case Init::Zeros:
        for (int64_t i = 0; i < n; ++i) w[i] = 0.0f;
        break;
      case Init::Ones:
        for (int64_t i = 0; i < n; ++i) w[i] = 1.0f;
        break;
      case Init::Normal:
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) w[i] = p.std * rng.normal(key, static_cast<uint32_t>(p.global_index(i)));
        break;
    }
  }
  if (device_ != Device::CPU) values_.copy_from(host);
}

Tensor ParamStore::value(int id) const {
  MEGADLM_CHECK(finalized_, "parameter read before the model was finalised");
  const ParamInfo& p = infos_.at(id);
  return Tensor::borrow(values_.data<float>() + p.offset, p.shape, DType::F32, device_);
}

Tensor ParamStore::grad(int id) const {
  MEGADLM_CHECK(finalized_, "gradient read before the model was finalised");
  const ParamInfo& p = infos_.at(id);
  return Tensor::borrow(grads_.data<float>() + p.offset, p.shape, DType::F32, device_);
}

int ParamStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

}  // namespace megadlm
