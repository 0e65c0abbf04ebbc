// Philox4x32-10 (Salmon et al. 2011) as merak/core/philox.cc computes it: the same rounds,
// key schedule, counter layout and output order, so a draw depends only on (key, index,
// stream) and a dropout mask is the same bits on either device.
#pragma once

#include <cstdint>

namespace merak::cuda_kernels {

struct PhiloxBlock {
  uint32_t v[4];
};

// The high and low words of the 64-bit product a * b (on the device, one mul.hi and one mul.lo:
// the compiler may otherwise widen to a full 64-bit multiply).
__host__ __device__ inline void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
#ifdef __CUDA_ARCH__
  hi = __umulhi(a, b);
#else
  hi = uint32_t((uint64_t(a) * b) >> 32);
#endif
  lo = a * b;
}

__host__ __device__ inline PhiloxBlock philox4x32_10(PhiloxBlock c, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kMul0, c.v[0], hi0, lo0);
    mul_hi_lo(kMul1, c.v[2], hi1, lo1);
    c = PhiloxBlock{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

// Element `index` of stream `stream`: counter = (index lo, index hi, stream lo, stream hi).
__host__ __device__ inline PhiloxBlock philox_at(uint64_t key, uint64_t index, uint64_t stream) {
  return philox4x32_10(PhiloxBlock{{uint32_t(index), uint32_t(index >> 32), uint32_t(stream),
                                    uint32_t(stream >> 32)}},
                       key);
}

}  // namespace merak::cuda_kernels
