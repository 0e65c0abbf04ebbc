#include "merak/cuda/copy_kernels.h"

namespace merak::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return int(b < 65535 * 32 ? b : 65535 * 32);
}

template <typename W>
__global__ void fill_kernel(W* data, int64_t n, W value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    data[i] = value;
}

template <typename W>
__global__ void strided_copy_kernel(W* dst, const W* src, StridedCopy v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, d_off = 0, s_off = 0;
    for (int d = v.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % v.shape[d];
      rest /= v.shape[d];
      d_off += idx * v.dst_strides[d];
      s_off += idx * v.src_strides[d];
    }
    dst[d_off] = src[s_off];
  }
}

template <typename W>
void fill_as(void* data, int64_t n, uint64_t bits, cudaStream_t s) {
  fill_kernel<W><<<blocks_for(n), kThreads, 0, s>>>(static_cast<W*>(data), n, W(bits));
}

template <typename W>
void copy_as(void* dst, const void* src, const StridedCopy& v, int64_t n, cudaStream_t s) {
  strided_copy_kernel<W><<<blocks_for(n), kThreads, 0, s>>>(static_cast<W*>(dst),
                                                            static_cast<const W*>(src), v, n);
}

}  // namespace

void launch_fill(void* data, int64_t n, int elem_size, uint64_t bits, cudaStream_t stream) {
  if (n <= 0) return;
  switch (elem_size) {
    case 1: fill_as<uint8_t>(data, n, bits, stream); break;
    case 2: fill_as<uint16_t>(data, n, bits, stream); break;
    case 4: fill_as<uint32_t>(data, n, bits, stream); break;
    default: fill_as<uint64_t>(data, n, bits, stream); break;
  }
}

void launch_strided_copy(void* dst, const void* src, int elem_size, const StridedCopy& view,
                         int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  switch (elem_size) {
    case 1: copy_as<uint8_t>(dst, src, view, n, stream); break;
    case 2: copy_as<uint16_t>(dst, src, view, n, stream); break;
    case 4: copy_as<uint32_t>(dst, src, view, n, stream); break;
    default: copy_as<uint64_t>(dst, src, view, n, stream); break;
  }
}

}  // namespace merak::cuda
