#include "merak/checkpoint/checksum.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "merak/core/parallel.h"

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

// One block's sum: four lanes over its 32-byte stripes, the tail folded in.
uint64_t block_sum(const unsigned char* p, size_t bytes) {
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

}  // namespace

uint64_t block_checksum(const void* data, size_t bytes) {
  return block_sum(static_cast<const unsigned char*>(data), bytes);
}

uint64_t combine_checksums(size_t bytes, const uint64_t* block_sums, size_t blocks) {
  if (blocks == 1) return block_sums[0];  // a single block is its own sum
  uint64_t h = uint64_t(bytes) * kA;
  for (size_t b = 0; b < blocks; ++b) h = mix_in(h, block_sums[b]);
  return finish(h);
}

uint64_t checksum(const void* data, size_t bytes, bool parallel) {
  // Blocks of 1 MiB summed independently (on the thread pool), then their sums in order: the
  // same value whatever the thread count.
  const auto* p = static_cast<const unsigned char*>(data);
  const int64_t blocks = int64_t((bytes + kChecksumBlock - 1) / kChecksumBlock);
  if (blocks <= 1) return block_sum(p, bytes);
  std::vector<uint64_t> sums(static_cast<size_t>(blocks));
  auto sum = [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const size_t at = size_t(b) * kChecksumBlock;
      sums[size_t(b)] = block_sum(p + at, std::min(kChecksumBlock, bytes - at));
    }
  };
  if (parallel) parallel_for(0, blocks, 1, sum);
  else sum(0, blocks);
  return combine_checksums(bytes, sums.data(), sums.size());
}

std::string checksum_hex(uint64_t c) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(c));
  return buf;
}

bool checksum_from_hex(const std::string& text, uint64_t* c) {
  if (text.empty() || text.size() > 16) return false;
  *c = 0;
  for (char ch : text) {
    const int digit = ch >= '0' && ch <= '9'   ? ch - '0'
                      : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                      : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                               : -1;
    if (digit < 0) return false;
    *c = *c << 4 | uint64_t(digit);
  }
  return true;
}

}  // namespace merak::checkpoint
