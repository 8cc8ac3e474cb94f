#pragma once
// What the loader consumes: a fixed-size, random-access collection of token samples, each holding
// seq_length + 1 ids (the model reads [0, T), the labels are [1, T + 1)). GPTDataset and
// BlendedDataset implement it; sample(i) must be a pure function of i, safe to call from any thread.
#include <cstdint>

namespace megadlm {

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t size() const = 0;        // number of samples
  virtual int64_t seq_length() const = 0;  // T; every sample has T + 1 tokens
  virtual void sample(int64_t i, int32_t* out) const = 0;  // out: [T + 1]; i in [0, size())
};

}  // namespace megadlm
