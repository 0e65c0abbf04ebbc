#include "merak/checkpoint/checksum.h"

#include <cstdio>
#include <cstring>

namespace merak::checkpoint {
namespace {

// Odd 64-bit constants with well-spread bits (multiplication by an odd number is invertible mod
// 2^64, so no word's change is ever lost in its lane).
constexpr uint64_t kA = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kB = 0xD6E8FEB86659FD93ULL;
constexpr uint64_t kC = 0xA0761D6478BD642FULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t mix_in(uint64_t lane, uint64_t word) { return rotl(lane ^ (word * kB), 29) * kA; }
inline uint64_t finish(uint64_t h) {
  h ^= h >> 31;
  h *= kC;
  h ^= h >> 29;
  h *= kB;
  return h ^ (h >> 32);
}

}  // namespace

uint64_t checksum(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {kA, kB, kC, kA ^ kB};
  size_t at = 0;
  for (; at + 32 <= bytes; at += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + at + 8 * k, 8);
      lane[k] = mix_in(lane[k], w);
    }
  uint64_t h = uint64_t(bytes) * kC;
  for (int k = 0; k < 4; ++k) h = mix_in(h, lane[k]) + uint64_t(k);
  for (; at + 8 <= bytes; at += 8) {
    uint64_t w;
    std::memcpy(&w, p + at, 8);
    h = mix_in(h, w);
  }
  for (; at < bytes; ++at) h = mix_in(h, p[at] + 0x100ULL);
  return finish(h);
}

std::string checksum_hex(uint64_t c) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(c));
  return buf;
}

}  // namespace merak::checkpoint
