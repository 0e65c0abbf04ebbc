// Little-endian integers in token files (our shards, llm.c's, Megatron's), so a file reads the
// same on any host.
#pragma once

#include <cstdint>

namespace merak::data {

// The unsigned integer in `bytes` bytes at `p`.
inline uint64_t load_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The low `bytes` bytes of `v`, at `p`.
inline void store_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace merak::data
