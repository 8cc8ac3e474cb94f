#pragma once
// The device-neutral types of the kernels' interface (kernels/backend.h): what a module hands a kernel
// besides pointers and sizes. Every backend takes them as they are; nothing here depends on a device.
#include <cstdint>

namespace megadlm {

// The label of a position that carries no loss (PyTorch's and HuggingFace's ignore_index).
constexpr int32_t kIgnoreIndex = -100;

// Which keys a query sees.
enum class MaskType : uint8_t {
  None,         // bidirectional: every query sees every key
  Causal,       // key j visible to query i iff j <= i
  BlockCausal,  // key j visible to query i iff j / block_size <= i / block_size
};

struct AttentionMask {
  MaskType type = MaskType::Causal;
  int64_t block_size = 0;                // for BlockCausal
  const int32_t* segment_ids = nullptr;  // [B, T] or null; when set, additionally key j is visible to
                                         // query i only if segment_ids[b,i] == segment_ids[b,j]
                                         // (documents packed in one sequence)
};

// One AdamW step's hyperparameters (kernels/cpu/optim.h has the update).
struct AdamWParams {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based step number, for bias correction
  float grad_scale = 1.0f;    // the gradient used is grad * grad_scale (clipping, folded into the pass)
  bool zero_grad = false;     // grad is set to zero once read (the next step's accumulation starts there)
};

}  // namespace megadlm
