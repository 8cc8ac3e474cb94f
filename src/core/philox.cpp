#include "core/philox.h"

#include <cmath>

namespace megadlm {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
}  // namespace

Philox4 philox4x32_10(Philox4 c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

Philox4 CounterRng::bits(uint64_t index, uint32_t position) const {
  return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), position, purpose_},
                       {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
}

float CounterRng::uniform(uint64_t index, uint32_t position, int lane) const {
  return bits_to_unit_float(bits(index, position)[lane & 3]);
}

double CounterRng::uniform_double(uint64_t index, uint32_t position) const {
  const Philox4 b = bits(index, position);
  const uint64_t x = (static_cast<uint64_t>(b[0]) << 21) ^ (b[1] >> 11);  // 53 bits
  return static_cast<double>(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

float CounterRng::normal(uint64_t index, uint32_t position) const {
  const Philox4 b = bits(index, position);
  // u1 in (0, 1] so that log(u1) is finite.
  const double u1 = (static_cast<double>(b[0]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(b[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

void fill_uniform(float* out, int64_t n, const CounterRng& rng, uint64_t index, uint32_t first_position) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = rng.uniform(index, first_position + static_cast<uint32_t>(i));
}

}  // namespace megadlm
