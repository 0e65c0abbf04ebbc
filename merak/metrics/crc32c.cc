#include "merak/metrics/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace merak::metrics {
namespace {

// Bit-reversed Castagnoli polynomial 0x1EDC6F41.
constexpr uint32_t kPoly = 0x82F63B78u;

// Eight tables for slicing-by-8: kTables[0][b] is the CRC register after shifting in byte b;
// kTables[k][b] is that of b followed by k zero bytes.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r & 1u) ? (r >> 1) ^ kPoly : r >> 1;
    t[0][b] = r;
  }
  for (int k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}

constexpr Tables kTables = make_tables();

uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t r = ~crc;
  // Eight bytes per step: the register's low four bytes combine with the first word, and each of
  // the eight bytes goes through the table for the number of bytes that follow it.
  while (n >= 8) {
    const uint32_t lo = load_le32(p) ^ r;
    const uint32_t hi = load_le32(p + 4);
    r = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) r = (r >> 8) ^ kTables[0][(r ^ *p++) & 0xFF];
  return ~r;
}

#if defined(__SSE4_2__)

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t r = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // unaligned load; x86 is little-endian like the CRC's bit order
    r = _mm_crc32_u64(r, word);
  }
  uint32_t r32 = uint32_t(r);
  while (n--) r32 = _mm_crc32_u8(r32, *p++);
  return ~r32;
}

bool crc32c_hardware() { return true; }

#else

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  return crc32c_extend_portable(crc, data, n);
}

bool crc32c_hardware() { return false; }

#endif

}  // namespace merak::metrics
