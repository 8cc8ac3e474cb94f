#pragma once
// FNV-1a, 64-bit: a small stable hash for naming things (parameter init streams, cache files) and
// for checksums of checkpoint files. Not cryptographic.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace megadlm {

constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;

// Continues a hash over more bytes: h = fnv1a64_update(fnv1a64_update(kFnv1a64Offset, a), b).
inline uint64_t fnv1a64_update(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

inline uint64_t fnv1a64(std::string_view s) { return fnv1a64_update(kFnv1a64Offset, s.data(), s.size()); }

}  // namespace megadlm
