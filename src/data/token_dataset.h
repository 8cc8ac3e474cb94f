#pragma once
// What the loader consumes: a fixed-size, random-access collection of token samples, each holding
// seq_length + 1 ids (the model reads [0, T), the labels are [1, T + 1)). GPTDataset, BlendedDataset
// and SftDataset implement it; sample(i) must be a pure function of i, safe to call from any thread.
// A supervised fine-tuning dataset (--sft) also carries a loss mask per token (data/loss_mask.h).
#include <cstdint>

#include "core/error.h"

namespace megadlm {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t size() const = 0;        // number of samples
  virtual int64_t seq_length() const = 0;  // T; every sample has T + 1 tokens
  virtual void sample(int64_t i, int32_t* out) const = 0;  // out: [T + 1]; i in [0, size())
  // Whether sample_loss_mask() is available: true for --sft data.
  virtual bool has_loss_mask() const { return false; }
  // The loss mask of sample i, one 0/1 value per token of sample(i); also a pure function of i.
  virtual void sample_loss_mask(int64_t i, uint8_t* out) const {  // out: [T + 1]
    (void)i;
    (void)out;
    fail("this dataset carries no loss mask (it is not --sft data)");
  }
};

}  // namespace megadlm
