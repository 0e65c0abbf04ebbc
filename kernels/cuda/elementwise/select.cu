// Comparison and selection kernels over broadcast layouts. where and masked_fill move stored
// elements as they are (no round trip through f32).
#include "kernels/cuda/elementwise/select.h"

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise/loops.cuh"

namespace merak::cuda_kernels {
namespace {

template <typename T>
struct EqBody {
  const T* a;
  const T* b;
  bool* y;
  template <typename I>
  __device__ void operator()(I i, const I (&off)[2]) const {
    y[i] = a[off[0]] == b[off[1]];
  }
};

template <typename S>
struct WhereBody {
  const bool* cond;
  const S* a;
  const S* b;
  S* y;
  template <typename I>
  __device__ void operator()(I i, const I (&off)[3]) const {
    y[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
  }
};

template <typename S>
struct MaskedFillBody {
  const S* x;
  const bool* mask;
  float value;
  S* y;
  template <typename I>
  __device__ void operator()(I i, const I (&off)[2]) const {
    y[i] = mask[off[1]] ? Storage<S>::store(value) : x[off[0]];
  }
};

template <typename T>
void eq_as(const void* a, const void* b, bool* y, const StridedLayout& layout, int64_t n,
           cudaStream_t stream) {
  launch_strided<2>(layout, n, EqBody<T>{static_cast<const T*>(a), static_cast<const T*>(b), y},
                    stream);
}

}  // namespace

void launch_eq(EqType type, const void* a, const void* b, bool* y, const StridedLayout& layout,
               int64_t n, cudaStream_t stream) {
  switch (type) {
    case EqType::F32: return eq_as<float>(a, b, y, layout, n, stream);
    case EqType::I32: return eq_as<int32_t>(a, b, y, layout, n, stream);
    case EqType::I64: return eq_as<int64_t>(a, b, y, layout, n, stream);
    case EqType::Bool: return eq_as<bool>(a, b, y, layout, n, stream);
  }
}

void launch_where(int elem, const bool* cond, const void* a, const void* b, void* y,
                  const StridedLayout& layout, int64_t n, cudaStream_t stream) {
  with_storage(elem, [&]<typename S>() {
    launch_strided<3>(layout, n,
                      WhereBody<S>{cond, static_cast<const S*>(a), static_cast<const S*>(b),
                                   static_cast<S*>(y)},
                      stream);
  });
}

void launch_masked_fill(int elem, const void* x, const bool* mask, float value, void* y,
                        const StridedLayout& layout, int64_t n, cudaStream_t stream) {
  with_storage(elem, [&]<typename S>() {
    launch_strided<2>(layout, n,
                      MaskedFillBody<S>{static_cast<const S*>(x), mask, value, static_cast<S*>(y)},
                      stream);
  });
}

}  // namespace merak::cuda_kernels
