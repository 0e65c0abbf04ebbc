// dtype conversion: each element is loaded as its value type (f32 for the floating ones),
// converted with the CPU's rules (kernels/cpu/elementwise.cc, convert), and stored.
#include "kernels/cuda/elementwise/cast.h"

#include <limits>
#include <type_traits>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise/loops.cuh"

namespace merak::cuda_kernels {
namespace {

// How a dtype is stored and the arithmetic type its values convert through.
template <typename St, typename V>
struct Plain {
  using storage = St;
  using value = V;
  __device__ static value load(storage s) { return s; }
  __device__ static storage store(value v) { return v; }
};
template <Scalar T> struct Type;
template <> struct Type<Scalar::F32> : Plain<float, float> {};
template <> struct Type<Scalar::I32> : Plain<int32_t, int32_t> {};
template <> struct Type<Scalar::I64> : Plain<int64_t, int64_t> {};
template <> struct Type<Scalar::Bool> : Plain<bool, bool> {};
template <typename S>
struct Half : Storage<S> {  // bf16 and f16: values are f32, rounded to nearest even when stored
  using storage = S;
  using value = float;
};
template <> struct Type<Scalar::BF16> : Half<__nv_bfloat16> {};
template <> struct Type<Scalar::F16> : Half<__half> {};

// Floating -> integer truncates toward zero with NaN -> 0 and saturation: the range test
// against 2^31 / 2^63, exact powers of two in f32, is the CPU's test in double.
template <typename To, typename From>
__device__ To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    constexpr float top = std::is_same_v<To, int32_t> ? 2147483648.0f : 9223372036854775808.0f;
    if (!(v == v)) return To(0);
    if (v >= top) return std::numeric_limits<To>::max();
    if (v < -top) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <Scalar From, Scalar To>
struct CastBody {
  const typename Type<From>::storage* x;
  typename Type<To>::storage* y;
  template <typename I>
  __device__ void operator()(I i) const {
    y[i] = Type<To>::store(convert<typename Type<To>::value>(Type<From>::load(x[i])));
  }
};

// Calls f.template operator()<t>() for a runtime Scalar t.
template <typename F>
void with_scalar(Scalar t, F&& f) {
  switch (t) {
    case Scalar::F32: return f.template operator()<Scalar::F32>();
    case Scalar::BF16: return f.template operator()<Scalar::BF16>();
    case Scalar::F16: return f.template operator()<Scalar::F16>();
    case Scalar::I32: return f.template operator()<Scalar::I32>();
    case Scalar::I64: return f.template operator()<Scalar::I64>();
    case Scalar::Bool: return f.template operator()<Scalar::Bool>();
  }
}

}  // namespace

void launch_cast(Scalar from, Scalar to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  with_scalar(from, [&]<Scalar F>() {
    with_scalar(to, [&]<Scalar T>() {
      if constexpr (F != T) {
        using Body = CastBody<F, T>;
        launch_flat(n,
                    Body{static_cast<const typename Type<F>::storage*>(x),
                         static_cast<typename Type<T>::storage*>(y)},
                    stream);
      }
    });
  });
}

}  // namespace merak::cuda_kernels
