// Device-side storage types of the CUDA kernels' element codes (common.h's Elem): values are
// loaded to f32, computed in f32, and rounded once when stored (as the CPU kernels do).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace merak::cuda_kernels {

template <typename S> struct Storage;
template <> struct Storage<float> {
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Storage<__nv_bfloat16> {
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Storage<__half> {
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};

// Calls f.template operator()<S>() with S the storage type of element code `elem` (0 f32,
// 1 bf16, 2 f16) on the host side of a launcher.
template <typename F>
void with_storage(int elem, F&& f) {
  switch (elem) {
    case 1: f.template operator()<__nv_bfloat16>(); break;
    case 2: f.template operator()<__half>(); break;
    default: f.template operator()<float>(); break;
  }
}

// A grid-stride loop's launch shape for n elements.
constexpr int kThreads = 256;
inline int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace merak::cuda_kernels
