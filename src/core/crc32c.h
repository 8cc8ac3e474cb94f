#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord files, and the
// mask TensorFlow applies to the checksums it stores. Debian 12 packages no CRC-32C library for C++
// (docs/ARCHITECTURE.md); this is the byte-at-a-time table form, fast enough for log records.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace megadlm {

// Continues a CRC over more bytes: crc32c_update(crc32c_update(0, a), b) == crc32c(a + b).
uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(std::string_view s) { return crc32c_update(0, s.data(), s.size()); }

// TensorFlow's masked form, stored in TFRecord files: a CRC of data that holds CRCs is itself
// unremarkable. mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t masked_crc32c(std::string_view s) { return mask_crc32c(crc32c(s)); }

}  // namespace megadlm
