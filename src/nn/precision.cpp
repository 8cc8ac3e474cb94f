#include "nn/precision.h"

#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace megadlm {

std::string describe_precision(const PrecisionConfig& c) {
  switch (c.mode) {
    case PrecisionMode::FP32: return "fp32";
    case PrecisionMode::BF16:
      return c.bf16_products ? "bf16 (bf16 products through oneDNN, fp32 accumulation and master weights)"
                             : "bf16 (bf16 storage of saved Linear inputs, fp32 products, fp32 master weights)";
    case PrecisionMode::FP16:
      return "fp16 emulated (Linear inputs, weights and gradients rounded to fp16, fp32 products; loss scaling)";
    case PrecisionMode::FP8:
      return std::string("fp8 emulated (") + fp8_format_name(c.fp8.format) +
             ", delayed scaling, amax history " + std::to_string(c.fp8.amax_history_len) + ", " +
             (c.fp8.amax_algo == Fp8AmaxAlgo::Max ? "max" : "most_recent") + ", margin " +
             std::to_string(c.fp8.margin) + "; quantised Linear inputs, fp32 products)";
  }
  return "?";
}

MixedPrecision::MixedPrecision(ParamStore& store, const PrecisionConfig& cfg)
    : store_(store), cfg_(cfg), device_(store.device()) {
  if (device_ != Device::CPU) transient_.set_device(device_);
}

DType MixedPrecision::saved_dtype() const {
  switch (cfg_.mode) {
    case PrecisionMode::BF16: return DType::BF16;
    case PrecisionMode::FP16: return DType::F16;
    case PrecisionMode::FP8: return DType::F8E4M3;
    default: return DType::F32;
  }
}

void MixedPrecision::weights_updated(bool bf16_copies_written) {
  ++version_;
  if (bf16_copies_written)
    for (auto& [id, w] : weights_)
      if (w.bits.raw()) w.version = version_;
  if (cfg_.mode == PrecisionMode::FP8)
    for (auto& [id, s] : fp8_) {
      s->input.update();
      s->weight.update();
      s->grad.update();
    }
}

MixedPrecision::WeightCopy& MixedPrecision::copy_of(int id) { return weights_[id]; }

const uint16_t* MixedPrecision::weight_bf16(int id) {
  WeightCopy& w = copy_of(id);
  if (w.version != version_) {
    const Tensor v = store_.value(id);
    if (!w.bits.raw() || w.bits.numel() != v.numel()) w.bits = Tensor::empty({v.numel()}, DType::BF16, device_);
    backend_for(device_).cast_f32_to_bf16(static_cast<uint16_t*>(w.bits.raw()), v.data<float>(), v.numel());
    w.version = version_;
    ++bf16_casts_;
  }
  return static_cast<const uint16_t*>(w.bits.raw());
}

std::vector<uint16_t*> MixedPrecision::bf16_copy_targets() {
  std::vector<uint16_t*> t;
  if (!bf16_gemm()) return t;
  t.assign(static_cast<size_t>(store_.count()), nullptr);
  for (auto& [id, w] : weights_) t[static_cast<size_t>(id)] = static_cast<uint16_t*>(w.bits.raw());
  return t;
}

const float* MixedPrecision::weight_rounded(int id) {
  WeightCopy& w = copy_of(id);
  if (w.version != version_) {
    const Backend& be = backend_for(device_);
    const Tensor v = store_.value(id);
    const int64_t n = v.numel();
    if (!w.rounded.raw() || w.rounded.numel() != n) w.rounded = Tensor::empty({n}, DType::F32, device_);
    float* r = w.rounded.data<float>();
    be.copy(r, v.data<float>(), static_cast<size_t>(n) * sizeof(float));
    if (cfg_.mode == PrecisionMode::FP16) be.round_to_f16(r, n);
    else if (cfg_.mode == PrecisionMode::FP8) fp8_quantize_dequantize(be, r, n, fp8_scaling(id).weight);
    else if (cfg_.mode == PrecisionMode::BF16) be.round_to_bf16(r, n);
    w.version = version_;
  }
  return w.rounded.data<float>();
}

bool MixedPrecision::fp8_products() const {
  return cfg_.mode == PrecisionMode::FP8 && backend_for(device_).fp8_products();
}

MixedPrecision::Fp8Weight MixedPrecision::weight_fp8(int id) {
  WeightCopy& w = copy_of(id);
  if (w.version != version_) {
    const Backend& be = backend_for(device_);
    const Tensor v = store_.value(id);
    const int64_t n = v.numel(), O = v.size(0), I = n / O;
    if (!w.fp8.raw() || w.fp8.numel() != n) {
      w.fp8 = Tensor::empty({O, I}, DType::F8E4M3, device_);
      w.fp8_t = Tensor::empty({I, O}, DType::F8E4M3, device_);
    }
    Fp8TensorScaling& s = fp8_scaling(id).weight;
    s.record(be.abs_max(v.data<float>(), n));
    const float scale = s.scale();
    be.cast_f32_to_fp8(static_cast<uint8_t*>(w.fp8.raw()), v.data<float>(), n, scale, /*e5m2=*/false);
    be.transpose_u8(static_cast<uint8_t*>(w.fp8_t.raw()), static_cast<const uint8_t*>(w.fp8.raw()), O, I);
    w.fp8_dequant = 1.0f / scale;
    w.version = version_;
  }
  return {static_cast<const uint8_t*>(w.fp8.raw()), static_cast<const uint8_t*>(w.fp8_t.raw()), w.fp8_dequant};
}

float MixedPrecision::quantize_grad(uint8_t* out, const float* dy, int64_t n, Fp8TensorScaling& s) const {
  const Backend& be = backend_for(device_);
  s.record(be.abs_max(dy, n));
  const float scale = s.scale();
  be.cast_f32_to_fp8(out, dy, n, scale, /*e5m2=*/s.kind() == Fp8Kind::E5M2);
  return scale;
}

Fp8LinearScaling& MixedPrecision::fp8_scaling(int weight_id) {
  auto& p = fp8_[weight_id];
  if (!p) {
    const Fp8Kind g = cfg_.fp8.format == Fp8Format::Hybrid ? Fp8Kind::E5M2 : Fp8Kind::E4M3;
    p = std::make_unique<Fp8LinearScaling>(Fp8LinearScaling{Fp8TensorScaling(Fp8Kind::E4M3, cfg_.fp8),
                                                            Fp8TensorScaling(Fp8Kind::E4M3, cfg_.fp8),
                                                            Fp8TensorScaling(g, cfg_.fp8)});
  }
  return *p;
}

float MixedPrecision::store_input(void* out, const float* x, int64_t n, Fp8TensorScaling* s) const {
  const Backend& be = backend_for(device_);
  switch (cfg_.mode) {
    case PrecisionMode::BF16: be.cast_f32_to_bf16(static_cast<uint16_t*>(out), x, n); return 1.0f;
    case PrecisionMode::FP16: be.cast_f32_to_f16(static_cast<uint16_t*>(out), x, n); return 1.0f;
    case PrecisionMode::FP8: {
      MEGADLM_CHECK(s != nullptr, "fp8: a Linear input was stored without its scaling state");
      s->record(be.abs_max(x, n));  // on a device: one synchronising download of the amax
      be.cast_f32_to_fp8(static_cast<uint8_t*>(out), x, n, s->scale(), /*e5m2=*/false);
      return s->scale();
    }
    default: be.copy(out, x, static_cast<size_t>(n) * sizeof(float)); return 1.0f;
  }
}

void MixedPrecision::load_input(float* out, const void* stored, int64_t n, float scale) const {
  const Backend& be = backend_for(device_);
  switch (cfg_.mode) {
    case PrecisionMode::BF16: be.cast_bf16_to_f32(out, static_cast<const uint16_t*>(stored), n); break;
    case PrecisionMode::FP16: be.cast_f16_to_f32(out, static_cast<const uint16_t*>(stored), n); break;
    case PrecisionMode::FP8:
      be.cast_fp8_to_f32(out, static_cast<const uint8_t*>(stored), n, 1.0f / scale, /*e5m2=*/false);
      break;
    default: be.copy(out, stored, static_cast<size_t>(n) * sizeof(float)); break;
  }
}

void MixedPrecision::round_grad(float* out, const float* dy, int64_t n, Fp8TensorScaling* s) {
  const Backend& be = backend_for(device_);
  if (out != dy) be.copy(out, dy, static_cast<size_t>(n) * sizeof(float));
  switch (cfg_.mode) {
    // fp16: values beyond 65504 become inf, as they would in fp16 (loss scaling then sees the overflow
    // and skips the step).
    case PrecisionMode::FP16: be.round_to_f16(out, n); break;
    case PrecisionMode::FP8:
      MEGADLM_CHECK(s != nullptr, "fp8: a gradient was quantised without its scaling state");
      fp8_quantize_dequantize(be, out, n, *s);
      break;
    case PrecisionMode::BF16: be.round_to_bf16(out, n); break;
    default: break;
  }
}

double MixedPrecision::buffer_bytes() const {
  double b = 0;
  // Tensors only once made (a default Tensor has no storage, though its empty shape counts 1).
  auto bytes_of = [](const Tensor& t) { return t.raw() ? static_cast<double>(t.nbytes()) : 0.0; };
  for (const auto& [id, w] : weights_) b += bytes_of(w.bits) + bytes_of(w.rounded) + bytes_of(w.fp8) + bytes_of(w.fp8_t);
  for (const auto& t : f32_) b += bytes_of(t);
  for (const auto& t : u16_) b += bytes_of(t);
  for (const auto& t : u8_) b += bytes_of(t);
  return b;
}

float* MixedPrecision::scratch_f32(int slot, int64_t n) {
  Tensor& t = f32_[slot];
  if (!t.raw() || t.numel() < n) t = Tensor::empty({n}, DType::F32, device_);
  return t.data<float>();
}

uint8_t* MixedPrecision::scratch_u8(int slot, int64_t n) {
  Tensor& t = u8_[slot];  // fp8 codes
  if (!t.raw() || t.numel() < n) t = Tensor::empty({n}, DType::F8E4M3, device_);
  return static_cast<uint8_t*>(t.raw());
}

uint16_t* MixedPrecision::scratch_u16(int slot, int64_t n) {
  Tensor& t = u16_[slot];  // 16-bit words (bf16 bits)
  if (!t.raw() || t.numel() < n) t = Tensor::empty({n}, DType::BF16, device_);
  return static_cast<uint16_t*>(t.raw());
}

DType activation_dtype(const MixedPrecision& p) {
  return p.mode() == PrecisionMode::FP16 ? DType::F16 : DType::BF16;
}

void store_activation(const MixedPrecision& p, Tensor& out, const Tensor& x) {
  (void)p;
  uint16_t* bits = static_cast<uint16_t*>(out.raw());
  if (out.dtype() == DType::F16) backend_of(x).cast_f32_to_f16(bits, x.data<float>(), x.numel());
  else backend_of(x).cast_f32_to_bf16(bits, x.data<float>(), x.numel());
}

void load_activation(Tensor& out, const Tensor& stored) {
  const uint16_t* bits = static_cast<const uint16_t*>(stored.raw());
  if (stored.dtype() == DType::F16) backend_of(out).cast_f16_to_f32(out.data<float>(), bits, stored.numel());
  else backend_of(out).cast_bf16_to_f32(out.data<float>(), bits, stored.numel());
}

}  // namespace megadlm
