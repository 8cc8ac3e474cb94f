#pragma once
// The data pipeline's random draws: Philox4x32-10 under RngPurpose::DataShuffle, so that every draw
// is a pure function of (seed, index, position) and a sample never depends on which samples were read
// before it. The shuffles (philox_shuffle, data/gpt_dataset.h) and the per-sample draws of the BERT
// and T5 datasets share these helpers; each user keeps to its own positions (streams).
#include <cstdint>

#include "core/philox.h"

namespace megadlm {

// 64 random bits of a Philox block (its lanes 0 and 1).
inline uint64_t philox_bits64(const Philox4& b) { return (static_cast<uint64_t>(b[1]) << 32) | b[0]; }

// A value uniform in [0, n) from 64 random bits, by a 64x64 -> 128-bit multiply (a bias below n / 2^64).
inline uint64_t draw_below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

// Successive draws for one item: the k-th draw is block (index, first_position + k).
class DrawStream {
 public:
  DrawStream(uint64_t seed, uint64_t index, uint32_t first_position)
      : rng_(seed, RngPurpose::DataShuffle), index_(index), position_(first_position) {}

  uint64_t bits64() { return philox_bits64(rng_.bits(index_, position_++)); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(bits64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform in [0, n), n >= 1.
  int64_t below(int64_t n) { return static_cast<int64_t>(draw_below(bits64(), static_cast<uint64_t>(n))); }

 private:
  CounterRng rng_;
  uint64_t index_;
  uint32_t position_;
};

}  // namespace megadlm
