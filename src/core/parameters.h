#pragma once
// ParamStore: every parameter of a model, and its gradient, lives in one flat fp32 buffer each.
// Modules register their parameters while the model is built (two-phase: register, then finalize);
// after finalize() they read Tensors that are views into the flat buffers. A gradient all-reduce,
// a clip or an optimizer step is then one pass over one buffer, and a checkpoint one write.
//
// Initialisation is layout-independent: element e of the parameter named `name` is drawn from
// Philox(seed, Init) at counter (hash(name), e), so a parameter gets the same values whatever the
// order in which parameters were registered, and (later) however it is sharded.
//
// The buffers live on one device (set_device before finalize): on CUDA, values() and grads() are device
// pointers, init() draws on the host and uploads (the same values as on the CPU for the same seed), and
// copy_values_to_host / copy_values_from_host / copy_grads_to_host move whole buffers for checkpoints
// and tests.
#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/hash.h"  // fnv1a64: the init stream of a parameter is keyed by the hash of its name
#include "core/tensor.h"

namespace megadlm {

enum class Init : uint8_t { Zeros, Ones, Normal };

// Rows [begin, begin + size) of `full` rows split into `parts` pieces as evenly as they go: every
// piece gets full / parts rows and the first full % parts pieces one more. Deterministic, so every
// rank computes every rank's piece (the vocabulary's split over tensor-parallel ranks).
struct RowRange {
  int64_t begin = 0, size = 0;
};
RowRange balanced_rows(int64_t full, int parts, int part);

struct ParamInfo {
  std::string name;     // HuggingFace-like, e.g. "layers.3.self_attn.q_proj.weight"
  Shape shape;
  int64_t offset = 0;   // elements into the flat buffers
  Init init = Init::Normal;
  float std = 0.02f;    // for Init::Normal
  bool weight_decay = true;  // false for norms and biases
  // Tensor-parallel sharding: this rank holds rows [shard_begin, shard_begin + shape[split_dim]) of
  // dimension split_dim of a tensor of full_shape. split_dim = -1: not sharded (full_shape == shape).
  // Init, checkpoints and HF conversion work on the full tensor's element indices, so values do not
  // depend on the layout.
  Shape full_shape;
  int split_dim = -1;
  int64_t shard_begin = 0;
  // Expert parameters are replicated over the expert-data-parallel group, not the data-parallel one.
  bool expert = false;
  // Global element index of local element i (row-major), for layout-independent init.
  int64_t global_index(int64_t i) const;
};

class ParamStore {
 public:
  // Registration: returns a handle. Names are unique.
  int add(const std::string& name, const Shape& shape, Init init, float std = 0.0f, bool weight_decay = true);
  // A shard of a tensor of full_shape split along split_dim into `parts` equal pieces; this rank holds
  // piece `part`. parts == 1 is add().
  int add_sharded(const std::string& name, const Shape& full_shape, int split_dim, int parts, int part, Init init,
                  float std = 0.0f, bool weight_decay = true);
  // The same split by balanced_rows, for a dimension that need not divide by `parts` (the vocabulary):
  // piece `part` holds balanced_rows(full_shape[split_dim], parts, part).
  int add_balanced_shard(const std::string& name, const Shape& full_shape, int split_dim, int parts, int part,
                         Init init, float std = 0.0f, bool weight_decay = true);
  // Marks a registered parameter as an expert parameter (its gradient is reduced over edp).
  void set_expert(int id) { infos_.at(id).expert = true; }
  // The device of the flat buffers (default CPU); only before finalize().
  void set_device(Device device);
  Device device() const { return device_; }
  // Allocates the flat buffers (gradients zeroed); parameters are left uninitialised until init().
  void finalize();
  void init(uint64_t seed);

  bool finalized() const { return finalized_; }
  Tensor value(int id) const;
  Tensor grad(int id) const;
  const ParamInfo& info(int id) const { return infos_.at(id); }
  int count() const { return static_cast<int>(infos_.size()); }
  int find(const std::string& name) const;  // -1 when absent

  int64_t numel() const { return numel_; }
  float* values() { return values_.data<float>(); }
  float* grads() { return grads_.data<float>(); }
  const float* values() const { return values_.data<float>(); }
  const float* grads() const { return grads_.data<float>(); }
  // Clears the gradients for the next accumulation, unless the last update left them zero
  // (note_grads_zeroed, by AdamW::apply_and_zero_grads, whose caller writes no gradient before this).
  // Every gradient is then unwritten (claim_unwritten_grad).
  void zero_grads() {
    if (!grads_zeroed_) grads_.zero_();
    grads_zeroed_ = false;
    std::fill(grad_unwritten_.begin(), grad_unwritten_.end(), uint8_t{1});
  }
  void note_grads_zeroed() { grads_zeroed_ = true; }
  // True, once, when parameter id's gradient still holds the zeros that zero_grads (or finalize) left:
  // the caller then writes its first contribution over it instead of adding it (a weight gradient's
  // product with beta = 0 does not read the old values, a whole pass over them saved). A layer that adds
  // to a gradient another layer may claim later in the same step marks it first (mark_grad_written), as
  // the tied word embedding does.
  bool claim_unwritten_grad(int id) {
    uint8_t& u = grad_unwritten_.at(static_cast<size_t>(id));
    const bool was = u != 0;
    u = 0;
    return was;
  }
  void mark_grad_written(int id) { grad_unwritten_.at(static_cast<size_t>(id)) = 0; }
  // beta of a product that writes parameter id's gradient: 0 when it takes the claim above, else 1.
  float grad_beta(int id) { return claim_unwritten_grad(id) ? 0.0f : 1.0f; }
  // Whole flat buffers [numel()] between the device and the host (plain copies on the CPU).
  void copy_values_to_host(float* host) const;
  void copy_values_from_host(const float* host);
  void copy_grads_to_host(float* host) const;
  const std::vector<ParamInfo>& infos() const { return infos_; }

 private:
  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, int> by_name_;
  int64_t numel_ = 0;
  bool finalized_ = false;
  Device device_ = Device::CPU;
  Tensor values_, grads_;
  bool grads_zeroed_ = false;  // see zero_grads()
  std::vector<uint8_t> grad_unwritten_;  // [count()], see claim_unwritten_grad()
};


}  // namespace megadlm
