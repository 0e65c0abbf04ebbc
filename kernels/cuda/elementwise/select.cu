// Comparison, logical and selection kernels over broadcast layouts. where and masked_fill move
// stored elements as they are (no round trip through f32).
#include "kernels/cuda/elementwise/select.h"

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise/loops.cuh"

namespace merak::cuda_kernels {
namespace {

struct EqOp {
  template <typename T>
  __device__ bool operator()(T a, T b) const { return a == b; }
};
struct LtOp {
  template <typename T>
  __device__ bool operator()(T a, T b) const { return a < b; }
};
struct GtOp {
  template <typename T>
  __device__ bool operator()(T a, T b) const { return a > b; }
};
struct LeOp {
  template <typename T>
  __device__ bool operator()(T a, T b) const { return a <= b; }
};
struct GeOp {
  template <typename T>
  __device__ bool operator()(T a, T b) const { return a >= b; }
};
struct AndOp {
  __device__ bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp {
  __device__ bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp {
  __device__ bool operator()(bool a, bool b) const { return a != b; }
};

// y = op(a, b) -> bool, each input in its own type (integers compared exactly).
template <typename T, typename Op>
struct CompareBody {
  const T* a;
  const T* b;
  bool* y;
  Op op;
  template <typename I>
  __device__ void operator()(I i, const I (&off)[2]) const {
    y[i] = op(a[off[0]], b[off[1]]);
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

template <typename T, typename Op>
void compare_as(Op op, const void* a, const void* b, bool* y, const StridedLayout& layout,
                int64_t n, cudaStream_t stream) {
  launch_strided<2>(
      layout, n, CompareBody<T, Op>{static_cast<const T*>(a), static_cast<const T*>(b), y, op},
      stream);
}

template <typename Op>
void compare_typed(Op op, EqType type, const void* a, const void* b, bool* y,
                   const StridedLayout& layout, int64_t n, cudaStream_t stream) {
  switch (type) {
    case EqType::F32: return compare_as<float>(op, a, b, y, layout, n, stream);
    case EqType::I32: return compare_as<int32_t>(op, a, b, y, layout, n, stream);
    case EqType::I64: return compare_as<int64_t>(op, a, b, y, layout, n, stream);
    case EqType::Bool: return compare_as<bool>(op, a, b, y, layout, n, stream);
  }
}

}  // namespace

void launch_compare(Compare op, EqType type, const void* a, const void* b, bool* y,
                    const StridedLayout& layout, int64_t n, cudaStream_t stream) {
  switch (op) {
    case Compare::Eq: return compare_typed(EqOp{}, type, a, b, y, layout, n, stream);
    case Compare::Lt: return compare_typed(LtOp{}, type, a, b, y, layout, n, stream);
    case Compare::Gt: return compare_typed(GtOp{}, type, a, b, y, layout, n, stream);
    case Compare::Le: return compare_typed(LeOp{}, type, a, b, y, layout, n, stream);
    case Compare::Ge: return compare_typed(GeOp{}, type, a, b, y, layout, n, stream);
  }
}

void launch_logical(Logical op, const bool* a, const bool* b, bool* y,
                    const StridedLayout& layout, int64_t n, cudaStream_t stream) {
  switch (op) {
    case Logical::And: return compare_as<bool>(AndOp{}, a, b, y, layout, n, stream);
    case Logical::Or: return compare_as<bool>(OrOp{}, a, b, y, layout, n, stream);
    case Logical::Xor: return compare_as<bool>(XorOp{}, a, b, y, layout, n, stream);
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
