// Byte-row copies (concat, slice_grad) and arange. The copies move units of U bytes, the widest
// of 16, 8, 4, 2, 1 that divides every address, pitch, width and offset involved.
#include "kernels/cuda/elementwise/copy.h"

#include <initializer_list>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise/loops.cuh"

namespace merak::cuda_kernels {
namespace {

// dst[r * dst_pitch + c] = src[r * src_pitch + c] for c < width, in units; i walks the source.
template <typename U, typename I>
__global__ void copy_rows_kernel(U* dst, I dst_pitch, const U* src, I src_pitch,
                                 Divider<I> width, I n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    const I r = width.div(i);
    const I c = i - r * width.d;
    dst[r * dst_pitch + c] = src[r * src_pitch + c];
  }
}

// dst rows of dst_width units: src's row at [offset, offset + src_width), zeros elsewhere.
template <typename U, typename I>
__global__ void pad_rows_kernel(U* dst, Divider<I> dst_width, const U* src, I src_width,
                                I offset, I n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(gridDim.x) * blockDim.x) {
    const I r = dst_width.div(i);
    const I c = i - r * dst_width.d;
    dst[i] = c >= offset && c - offset < src_width ? src[r * src_width + c - offset] : U{};
  }
}

// The widest unit dividing every value in `bytes` (addresses, pitches, widths).
int unit_of(std::initializer_list<uint64_t> bytes) {
  uint64_t all = 16;
  for (uint64_t b : bytes) all |= b;
  return int(all & (~all + 1));  // the lowest set bit: at most 16
}

// Calls f.template operator()<U>() with U the unsigned type of `unit` bytes.
template <typename F>
void with_unit(int unit, F&& f) {
  switch (unit) {
    case 16: return f.template operator()<uint4>();
    case 8: return f.template operator()<uint2>();
    case 4: return f.template operator()<uint32_t>();
    case 2: return f.template operator()<uint16_t>();
    default: return f.template operator()<uint8_t>();
  }
}

template <typename U, typename I>
void copy_rows_as(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                  int64_t width, cudaStream_t stream) {
  const int64_t n = rows * width;
  copy_rows_kernel<U, I><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<U*>(dst), I(dst_pitch), static_cast<const U*>(src), I(src_pitch),
      Divider<I>(I(width)), I(n));
}

template <typename U, typename I>
void pad_rows_as(void* dst, int64_t dst_width, const void* src, int64_t src_width,
                 int64_t offset, int64_t rows, cudaStream_t stream) {
  const int64_t n = rows * dst_width;
  pad_rows_kernel<U, I><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<U*>(dst), Divider<I>(I(dst_width)), static_cast<const U*>(src), I(src_width),
      I(offset), I(n));
}

struct ArangeBody {
  int64_t* y;
  template <typename I>
  __device__ void operator()(I i) const {
    y[i] = int64_t(i);
  }
};

}  // namespace

void launch_copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                      int64_t rows, int64_t width, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return;
  const int unit = unit_of({uint64_t(reinterpret_cast<uintptr_t>(dst)),
                            uint64_t(reinterpret_cast<uintptr_t>(src)), uint64_t(dst_pitch),
                            uint64_t(src_pitch), uint64_t(width)});
  const int64_t dp = dst_pitch / unit, sp = src_pitch / unit, w = width / unit;
  // 32-bit indices when every offset the kernel forms fits.
  const bool small = rows * (dp > sp ? dp : sp) <= INT32_MAX && rows * w <= INT32_MAX;
  with_unit(unit, [&]<typename U>() {
    if (small) copy_rows_as<U, uint32_t>(dst, dp, src, sp, rows, w, stream);
    else copy_rows_as<U, int64_t>(dst, dp, src, sp, rows, w, stream);
  });
}

void launch_pad_rows(void* dst, int64_t dst_width, const void* src, int64_t src_width,
                     int64_t offset, int64_t rows, cudaStream_t stream) {
  if (rows <= 0 || dst_width <= 0) return;
  const int unit = unit_of({uint64_t(reinterpret_cast<uintptr_t>(dst)),
                            uint64_t(reinterpret_cast<uintptr_t>(src)), uint64_t(dst_width),
                            uint64_t(src_width), uint64_t(offset)});
  const int64_t dw = dst_width / unit, sw = src_width / unit, off = offset / unit;
  const bool small = rows * dw <= INT32_MAX;  // dst is the larger of the two
  with_unit(unit, [&]<typename U>() {
    if (small) pad_rows_as<U, uint32_t>(dst, dw, src, sw, off, rows, stream);
    else pad_rows_as<U, int64_t>(dst, dw, src, sw, off, rows, stream);
  });
}

void launch_arange(int64_t* y, int64_t n, cudaStream_t stream) {
  launch_flat(n, ArangeBody{y}, stream);
}

}  // namespace merak::cuda_kernels
