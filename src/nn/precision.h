#pragma once
// The mixed-precision policy of the matrix products (Megatron's --bf16 / --fp16 / --fp8-format),
// shared by every Linear layer of a model. Master weights, gradients, optimizer state, reductions,
// norms, softmax and the loss stay fp32 in every mode; only what goes into a Linear's matrix
// products changes:
//
//   fp32   x, W fp32 -> fp32 products (the default).
//   bf16   x, W, dy rounded to bf16, products through oneDNN's bf16 matmul with fp32 accumulation;
//          or, with bf16_products off (where the CPU multiplies bf16 slower than fp32), fp32
//          products with only the saved inputs stored in bf16 ("bf16 storage").
//   fp16   x, W, dy rounded to fp16 (values representable in fp16, so gradients overflow to inf as
//          they would in fp16), multiplied in fp32: fp16 products emulated. Used with loss scaling.
//   fp8    x and W quantised to E4M3, dy to E5M2 (hybrid) or E4M3, with delayed per-tensor scaling
//          (nn/fp8_scaling.h), dequantised and multiplied in fp32: fp8 products emulated.
//
// The low-precision copy of each weight matrix is made once per optimizer step (weights_updated()
// marks them stale), not per micro-batch. The input a Linear saves for its backward is stored in the
// narrow format (bf16 / fp16 bits, fp8 bytes) instead of as a view of the fp32 input.
//
// On a device (the ParamStore's, e.g. CUDA) the weight copies, the scratch buffers and the transient
// arena live there too. Only fp32 and bf16 with bf16 products are supported on a device so far; the
// constructor rejects the other modes with an Error naming the flags.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "nn/fp8_scaling.h"
#include "core/parameters.h"

namespace megadlm {

enum class PrecisionMode : uint8_t { FP32, BF16, FP16, FP8 };

struct PrecisionConfig {
  PrecisionMode mode = PrecisionMode::FP32;
  bool bf16_products = true;  // --bf16: bf16 products (true) or bf16 storage with fp32 products
  Fp8Recipe fp8;
};

// Whether the Linear and output-layer products run in oneDNN bf16 (--bf16 without --bf16-storage-only).
inline bool bf16_products_on(const PrecisionConfig& c) { return c.mode == PrecisionMode::BF16 && c.bf16_products; }
// Whether the MLP remakes its activation (fc2's input) in the backward instead of keeping it: under
// bf16 (products or storage only) and fp16, whose fc2 input copy has the activation dtype (nn/mlp.h).
inline bool remakes_mlp_activation(const PrecisionConfig& c) {
  return c.mode == PrecisionMode::BF16 || c.mode == PrecisionMode::FP16;
}

// One line for the log: which path the products take.
std::string describe_precision(const PrecisionConfig& c);

// The fp8 scaling state of one Linear layer: its input, its weight, its output gradient.
struct Fp8LinearScaling {
  Fp8TensorScaling input, weight, grad;
};

class MixedPrecision {
 public:
  MixedPrecision(ParamStore& store, const PrecisionConfig& cfg);

  const PrecisionConfig& config() const { return cfg_; }
  PrecisionMode mode() const { return cfg_.mode; }
  // Whether Linear products run in oneDNN bf16 (else fp32 products, possibly on rounded values).
  bool bf16_gemm() const { return bf16_products_on(cfg_); }
  // dtype of a saved Linear input: BF16, F16, F8E4M3, or F32 in fp32 mode.
  DType saved_dtype() const;

  // Call after every change of the fp32 weights (each optimizer step, a checkpoint load): the
  // low-precision weight copies are remade at their next use, and the fp8 scales advance one step.
  // bf16_copies_written: the optimizer has just written the copies of bf16_copy_targets() (in the same
  // pass as the weights), so those stay current.
  void weights_updated(bool bf16_copies_written = false);
  // Under bf16 products, per parameter id, the bf16 copy an optimizer may write along with its update
  // (the copies made so far, i.e. every matrix after the first step); empty otherwise.
  std::vector<uint16_t*> bf16_copy_targets();
  // How many times a bf16 weight copy was made by a cast (tests: none in the steady state when the
  // optimizer writes them).
  int64_t bf16_casts() const { return bf16_casts_; }

  // Low-precision copies of weight `id`, remade when stale: raw bf16 bits (bf16_gemm) or fp32 values
  // rounded to fp16 / quantised through fp8 (with the weight's fp8 scaling, recorded at the remake).
  const uint16_t* weight_bf16(int id);
  const float* weight_rounded(int id);

  // fp8 products (a device whose Backend::fp8_products() is true, under --fp8-format): the Linear
  // layers multiply fp8 codes through Backend::gemm_fp8 instead of dequantised fp32 copies, the same
  // values (the recipe and its amax history are unchanged).
  bool fp8_products() const;
  // Weight `id` [O, I] as E4M3 codes, and transposed [I, O] (the input gradient's operand), with its
  // dequantisation factor; remade when stale, recording the weight's amax as weight_rounded does.
  struct Fp8Weight {
    const uint8_t* w = nullptr;   // [O, I]
    const uint8_t* wt = nullptr;  // [I, O]
    float dequant = 1.0f;         // 1 / the quantisation scale
  };
  Fp8Weight weight_fp8(int id);
  // dy [n] -> fp8 codes at out (E5M2 under hybrid, else E4M3: the scaling's kind), recording its amax;
  // returns the quantisation scale.
  float quantize_grad(uint8_t* out, const float* dy, int64_t n, Fp8TensorScaling& s) const;

  // Each Linear registers once for its fp8 scaling state (one per weight id).
  Fp8LinearScaling& fp8_scaling(int weight_id);

  // x [n] fp32 -> the narrow storage format at out (bytes per element of saved_dtype()); fp8 records
  // amax and uses the scaling `s` (may be null otherwise). Returns the scale applied (1 unless fp8).
  float store_input(void* out, const float* x, int64_t n, Fp8TensorScaling* s) const;
  // The stored input back to fp32 (values exactly as the forward used them).
  void load_input(float* out, const void* stored, int64_t n, float scale) const;
  // dy [n] rounded into out [n] (may alias dy) as the backward products of the emulated modes take it;
  // fp8 records amax and quantises with the scaling `s`.
  void round_grad(float* out, const float* dy, int64_t n, Fp8TensorScaling* s);

  // Bytes held by the weight copies and scratch buffers (for the memory report).
  double buffer_bytes() const;

  // The activations of one layer call that are not kept for the backward: the fp32 values a layer
  // makes before it stores their narrow copies (norm outputs, q/k/v, the attention output, the MLP's
  // fc1 output and activation) and its backward's temporaries. Every layer call empties it when it
  // returns (reset()), so it holds one layer's worth, while the model's arena keeps only the narrow
  // copies and the residual stream.
  Arena& transient() { return transient_; }
  double transient_bytes() const { return static_cast<double>(transient_.high_water()); }

  // Reusable scratch buffers (grown, never shrunk: no allocation in the steady state).
  float* scratch_f32(int slot, int64_t n);
  uint16_t* scratch_u16(int slot, int64_t n);
  uint8_t* scratch_u8(int slot, int64_t n);  // slots 0..2: fp8 codes of dy, dy^T, x^T

 private:
  struct WeightCopy {
    int64_t version = -1;
    Tensor bits;     // bf16, on the policy's device (undefined until first made)
    Tensor rounded;  // fp32, on the policy's device: the emulated modes' rounded weights
    Tensor fp8, fp8_t;  // E4M3 codes [O, I] and [I, O], under fp8 products
    float fp8_dequant = 1.0f;
  };
  WeightCopy& copy_of(int id);

  ParamStore& store_;
  PrecisionConfig cfg_;
  int64_t version_ = 0;
  int64_t bf16_casts_ = 0;
  std::unordered_map<int, WeightCopy> weights_;
  std::unordered_map<int, std::unique_ptr<Fp8LinearScaling>> fp8_;
  Tensor f32_[2];  // on the policy's device; 0, 1: Linear input / gradient
  Tensor u16_[1];  // on the policy's device: Linear's bf16 gradient
  Tensor u8_[3];   // on the policy's device: fp8 codes of the backward's operands
  Device device_ = Device::CPU;
  Arena transient_;
};

// Activations saved for an elementwise backward (the MLP's GELU / SwiGLU input): bf16, or fp16 under
// --fp16 (fp8 keeps them in bf16, as Transformer Engine keeps non-GEMM activations in high precision).
DType activation_dtype(const MixedPrecision& p);
void store_activation(const MixedPrecision& p, Tensor& out, const Tensor& x);  // x fp32 -> out narrow
void load_activation(Tensor& out, const Tensor& stored);                       // stored narrow -> out fp32

}  // namespace megadlm
