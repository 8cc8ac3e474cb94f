#pragma once
// The device-neutral types of the kernels' interface (kernels/backend.h): what a module hands a kernel
// besides pointers and sizes. Every backend takes them as they are; nothing here depends on a device.
#include <cstdint>

namespace megadlm {

// The label of a position that carries no loss (PyTorch's and HuggingFace's ignore_index).
constexpr int32_t kIgnoreIndex = -100;

// The MLP's activation: GELU (tanh approximation) of fc1's output, or SwiGLU of its [gate; up] halves.
enum class Activation : uint8_t { Gelu, SwiGLU };

// Which keys a query sees.
enum class MaskType : uint8_t {
  None,         // bidirectional: every query sees every key
  Causal,       // key j visible to query i iff j <= i
  BlockCausal,  // key j visible to query i iff j / block_size <= i / block_size
  // Block diffusion's training layout (BD3-LM, objectives/block_diffusion.h): the sequence is two halves
  // of T/2 rows, the noised copy x_t then the clean x_0, cut into blocks of block_size by the index
  // within its half. A noised query of block b sees the noised keys of block b and the clean keys of
  // blocks < b; a clean query of block b sees the clean keys of blocks <= b; no clean query sees a
  // noised key. T must be even.
  BlockDiffusion,
};

struct AttentionMask {
  MaskType type = MaskType::Causal;
  int64_t block_size = 0;                // for BlockCausal and BlockDiffusion
  const int32_t* segment_ids = nullptr;  // [B, T] or null; when set, additionally key j is visible to
                                         // query i only if segment_ids[b,i] == segment_ids[b,j]
                                         // (documents packed in one sequence)
  // [B, T] the keys' segment ids when they are not the queries' (context parallelism pairs a query
  // chunk with another rank's key chunk: nn/ring_attention.h), or null: the keys' are segment_ids.
  // With it, segment_ids must be set too. The fp32 kernels only (the ring runs its attention in fp32).
  const int32_t* key_segment_ids = nullptr;
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

// One softmax cross-entropy over rows of logits (the formulas: kernels/cpu/cross_entropy.h): the whole
// vocabulary on one rank, or this rank's shard of it under tensor parallelism (Backend's
// cross_entropy* ops, nn/vocab_parallel_cross_entropy.h). Every pointer on the backend's device.
struct CrossEntropyArgs {
  const void* logits = nullptr;      // [N, Vl], fp32, or bf16 bits when logits_bf16
  bool logits_bf16 = false;
  float* losses = nullptr;           // [N] each row's weighted loss, or null
  float* dlogits = nullptr;          // [N, Vl] the fp32 gradient (may alias fp32 logits), or null; with fp32
                                     // logits at tp > 1 it holds the exponentials between the pieces
  uint16_t* dlogits_bf16 = nullptr;  // [N, Vl] the gradient in bf16 instead (may alias bf16 logits), or null
  const int32_t* targets = nullptr;  // [N], ignore_index where no loss
  const float* weights = nullptr;    // [N], or null for 1
  int64_t ignore_index = kIgnoreIndex;
  float grad_scale = 1.0f;           // multiplies the gradient
  int64_t N = 0, Vl = 0;             // rows; this rank's columns
  int64_t vocab_start = 0, V = 0;    // the shard's first column; the whole vocabulary
};

}  // namespace megadlm
