#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator. Each draw is a pure function of (key, counter), so a number depends only on *what* it is
// for, never on which thread, rank or step order produced it. This is what makes diffusion noise,
// dropout and data order identical under any thread count, TP/PP/DP layout, and after a resume.
//
// Convention for the whole framework:
//   key     = the 64-bit run seed
//   counter = (index low 32, index high 32, position, purpose)
// where `index` is usually the global sample index and `position` the token position.
#include <array>
#include <cstdint>

namespace megadlm {

using Philox4 = std::array<uint32_t, 4>;

// One Philox4x32-10 block: 4 random words for a 128-bit counter and 64-bit key.
Philox4 philox4x32_10(Philox4 counter, std::array<uint32_t, 2> key);

// What a stream of random numbers is for. Each purpose is an independent stream.
enum class RngPurpose : uint32_t {
  DiffusionTime = 1,   // t per sequence
  DiffusionMask = 2,   // mask decision per token
  Dropout = 3,
  DataShuffle = 4,
  Init = 5,            // parameter initialisation (index = parameter id, position = element chunk)
  VariableLength = 6,  // --difflm-varilen-prob
  Sampling = 7,        // generation
  Test = 99,
};

class CounterRng {
 public:
  CounterRng(uint64_t seed, RngPurpose purpose) : seed_(seed), purpose_(static_cast<uint32_t>(purpose)) {}

  Philox4 bits(uint64_t index, uint32_t position) const;
  // Uniform in [0, 1) with 24 random bits; `lane` (0..3) picks one of the block's four words.
  float uniform(uint64_t index, uint32_t position, int lane = 0) const;
  // Uniform in [0, 1) with 53 random bits (uses lanes 0 and 1).
  double uniform_double(uint64_t index, uint32_t position) const;
  // Standard normal by Box-Muller (uses lanes 2 and 3 with lanes 0 and 1).
  float normal(uint64_t index, uint32_t position) const;

  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  uint32_t purpose_;
};

// Fills out[i] = rng.uniform(index, first_position + i) for i in [0, n), threaded; the result does
// not depend on the number of threads.
void fill_uniform(float* out, int64_t n, const CounterRng& rng, uint64_t index, uint32_t first_position);

inline float bits_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

}  // namespace megadlm
