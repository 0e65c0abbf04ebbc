// CRC-32C (Castagnoli polynomial, the checksum of TFRecord files) and TFRecord's masking of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace merak::metrics {

// The CRC-32C of the bytes whose CRC-32C is `crc` followed by data[0, n): crc32c_extend(0, ...)
// is the CRC of data alone, and extending chunk by chunk equals one call over the concatenation.
// Uses the SSE4.2 crc32 instruction when the build targets it, the portable table otherwise.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

// The table-driven path, always available (the tests compare the two).
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

// True when crc32c_extend runs on the SSE4.2 instruction.
bool crc32c_hardware();

inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }
inline uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

// TFRecord stores CRCs masked (rotated right by 15 bits, plus a constant), so that the CRC of a
// buffer that itself contains CRCs stays well distributed.
constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;
constexpr uint32_t crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta;
}
constexpr uint32_t crc32c_unmask(uint32_t masked) {
  const uint32_t r = masked - kCrc32cMaskDelta;
  return (r << 15) | (r >> 17);
}

}  // namespace merak::metrics
