#include "nn/parameters.h"

#include "core/hash.h"
#include "core/philox.h"

namespace megadlm {

int ParamStore::add(const std::string& name, const Shape& shape, Init init, float std, bool weight_decay) {
  MDLM_CHECK(!finalized_, "parameter '", name, "' registered after the model was finalised");
  MDLM_CHECK(!by_name_.count(name), "parameter '", name, "' registered twice");
  ParamInfo p;
  p.name = name;
  p.shape = shape;
  p.offset = numel_;
  p.init = init;
  p.std = std;
  p.weight_decay = weight_decay;
  // Keep every parameter 64-byte aligned inside the flat buffer (16 floats).
  numel_ += (shape.numel() + 15) / 16 * 16;
  by_name_[name] = static_cast<int>(infos_.size());
  infos_.push_back(p);
  return static_cast<int>(infos_.size()) - 1;
}

void ParamStore::finalize() {
  MDLM_CHECK(!finalized_, "ParamStore finalised twice");
  values_ = Tensor::zeros({numel_}, DType::F32);
  grads_ = Tensor::zeros({numel_}, DType::F32);
  finalized_ = true;
}

void ParamStore::init(uint64_t seed) {
  MDLM_CHECK(finalized_, "ParamStore::init before finalize");
  const CounterRng rng(seed, RngPurpose::Init);
  for (const ParamInfo& p : infos_) {
    float* w = values() + p.offset;
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
        for (int64_t i = 0; i < n; ++i) w[i] = p.std * rng.normal(key, static_cast<uint32_t>(i));
        break;
    }
  }
}

Tensor ParamStore::value(int id) const {
  MDLM_CHECK(finalized_, "parameter read before the model was finalised");
  const ParamInfo& p = infos_.at(id);
  return Tensor::borrow(values_.data<float>() + p.offset, p.shape, DType::F32);
}

Tensor ParamStore::grad(int id) const {
  MDLM_CHECK(finalized_, "gradient read before the model was finalised");
  const ParamInfo& p = infos_.at(id);
  return Tensor::borrow(grads_.data<float>() + p.offset, p.shape, DType::F32);
}

int ParamStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

}  // namespace megadlm
