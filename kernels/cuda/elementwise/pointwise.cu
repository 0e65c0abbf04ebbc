// Arithmetic, unary math and activation kernels: each op is a small functor on f32 values,
// applied by a flat loop (unary) or a broadcasting one (binary).
#include "kernels/cuda/elementwise/pointwise.h"

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise/loops.cuh"
#include "kernels/cuda/elementwise/math.cuh"

namespace merak::cuda_kernels {
namespace {

// --- unary functors: float -> float ---

struct AddScalarOp {
  float v;
  __device__ float operator()(float x) const { return x + v; }
};
struct MulScalarOp {
  float v;
  __device__ float operator()(float x) const { return x * v; }
};
struct NegOp {
  __device__ float operator()(float x) const { return -x; }
};
struct ExpOp {
  __device__ float operator()(float x) const { return math::exp_sat(x); }
};
struct LogOp {
  __device__ float operator()(float x) const { return logf(x); }
};
struct SqrtOp {
  __device__ float operator()(float x) const { return sqrtf(x); }
};
// 1 / sqrt(x), both correctly rounded as on the CPU (rsqrtf is an approximation).
struct RsqrtOp {
  __device__ float operator()(float x) const { return 1.0f / sqrtf(x); }
};
struct TanhOp {
  __device__ float operator()(float x) const { return math::tanh(x); }
};
struct ErfOp {
  __device__ float operator()(float x) const { return math::erf(x); }
};
struct ReluOp {  // NaN stays NaN: only x < 0 is replaced
  __device__ float operator()(float x) const { return math::relu(x); }
};
struct GeluTanhOp {
  __device__ float operator()(float x) const { return math::gelu_tanh(x); }
};
struct GeluErfOp {
  __device__ float operator()(float x) const { return math::gelu_erf(x); }
};
struct CopyOp {
  __device__ float operator()(float x) const { return x; }
};
struct SquareOp {
  __device__ float operator()(float x) const { return x * x; }
};
struct CubeOp {
  __device__ float operator()(float x) const { return x * x * x; }
};
struct ReciprocalOp {
  __device__ float operator()(float x) const { return 1.0f / x; }
};
struct InvSquareOp {
  __device__ float operator()(float x) const { return 1.0f / (x * x); }
};
struct PowOp {
  float e;
  __device__ float operator()(float x) const { return powf(x, e); }
};
struct AbsOp {
  __device__ float operator()(float x) const { return fabsf(x); }
};
struct SignOp {  // NaN stays NaN
  __device__ float operator()(float x) const { return x != x ? x : float((x > 0.0f) - (x < 0.0f)); }
};
struct FloorOp {
  __device__ float operator()(float x) const { return floorf(x); }
};
struct CeilOp {
  __device__ float operator()(float x) const { return ceilf(x); }
};

// --- binary functors: (float, float) -> float ---

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SubOp {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct DivOp {
  __device__ float operator()(float a, float b) const { return a / b; }
};
struct ReluGradOp {  // (dy, y): dy where y > 0
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
struct GeluTanhGradOp {  // (dy, x)
  __device__ float operator()(float dy, float x) const { return dy * math::gelu_tanh_grad(x); }
};
struct GeluErfGradOp {
  __device__ float operator()(float dy, float x) const { return dy * math::gelu_erf_grad(x); }
};
// As the CPU's: a NaN on either side is the result.
struct MaximumOp {
  __device__ float operator()(float a, float b) const { return a > b || a != a ? a : b; }
};
struct MinimumOp {
  __device__ float operator()(float a, float b) const { return a < b || a != a ? a : b; }
};
struct PowTensorOp {
  __device__ float operator()(float a, float b) const { return powf(a, b); }
};

// --- loop bodies ---

template <typename S, typename Op>
struct UnaryBody {
  const S* x;
  S* y;
  Op op;
  template <typename I>
  __device__ void operator()(I i) const {
    y[i] = Storage<S>::store(op(Storage<S>::load(x[i])));
  }
};

template <typename S, typename Op>
struct BinaryBody {
  const S* a;
  const S* b;
  S* y;
  Op op;
  template <typename I>
  __device__ void operator()(I i, const I (&off)[2]) const {
    y[i] = Storage<S>::store(op(Storage<S>::load(a[off[0]]), Storage<S>::load(b[off[1]])));
  }
};

template <typename Op>
void unary(Op op, int elem, const void* x, void* y, int64_t n, cudaStream_t stream) {
  with_storage(elem, [&]<typename S>() {
    launch_flat(n, UnaryBody<S, Op>{static_cast<const S*>(x), static_cast<S*>(y), op}, stream);
  });
}

template <typename Op>
void binary(Op op, int elem, const void* a, const void* b, void* y, const StridedLayout& layout,
            int64_t n, cudaStream_t stream) {
  with_storage(elem, [&]<typename S>() {
    launch_strided<2>(layout, n,
                      BinaryBody<S, Op>{static_cast<const S*>(a), static_cast<const S*>(b),
                                        static_cast<S*>(y), op},
                      stream);
  });
}

}  // namespace

void launch_unary(Unary op, int elem, const void* x, void* y, int64_t n, float param,
                  cudaStream_t stream) {
  switch (op) {
    case Unary::AddScalar: return unary(AddScalarOp{param}, elem, x, y, n, stream);
    case Unary::MulScalar: return unary(MulScalarOp{param}, elem, x, y, n, stream);
    case Unary::Neg: return unary(NegOp{}, elem, x, y, n, stream);
    case Unary::Exp: return unary(ExpOp{}, elem, x, y, n, stream);
    case Unary::Log: return unary(LogOp{}, elem, x, y, n, stream);
    case Unary::Sqrt: return unary(SqrtOp{}, elem, x, y, n, stream);
    case Unary::Rsqrt: return unary(RsqrtOp{}, elem, x, y, n, stream);
    case Unary::Tanh: return unary(TanhOp{}, elem, x, y, n, stream);
    case Unary::Erf: return unary(ErfOp{}, elem, x, y, n, stream);
    case Unary::Relu: return unary(ReluOp{}, elem, x, y, n, stream);
    case Unary::GeluTanh: return unary(GeluTanhOp{}, elem, x, y, n, stream);
    case Unary::GeluErf: return unary(GeluErfOp{}, elem, x, y, n, stream);
    case Unary::Copy: return unary(CopyOp{}, elem, x, y, n, stream);
    case Unary::Square: return unary(SquareOp{}, elem, x, y, n, stream);
    case Unary::Cube: return unary(CubeOp{}, elem, x, y, n, stream);
    case Unary::Reciprocal: return unary(ReciprocalOp{}, elem, x, y, n, stream);
    case Unary::InvSquare: return unary(InvSquareOp{}, elem, x, y, n, stream);
    case Unary::Pow: return unary(PowOp{param}, elem, x, y, n, stream);
    case Unary::Abs: return unary(AbsOp{}, elem, x, y, n, stream);
    case Unary::Sign: return unary(SignOp{}, elem, x, y, n, stream);
    case Unary::Floor: return unary(FloorOp{}, elem, x, y, n, stream);
    case Unary::Ceil: return unary(CeilOp{}, elem, x, y, n, stream);
  }
}

void launch_binary(Binary op, int elem, const void* a, const void* b, void* y,
                   const StridedLayout& layout, int64_t n, cudaStream_t stream) {
  switch (op) {
    case Binary::Add: return binary(AddOp{}, elem, a, b, y, layout, n, stream);
    case Binary::Sub: return binary(SubOp{}, elem, a, b, y, layout, n, stream);
    case Binary::Mul: return binary(MulOp{}, elem, a, b, y, layout, n, stream);
    case Binary::Div: return binary(DivOp{}, elem, a, b, y, layout, n, stream);
    case Binary::ReluGrad: return binary(ReluGradOp{}, elem, a, b, y, layout, n, stream);
    case Binary::GeluTanhGrad: return binary(GeluTanhGradOp{}, elem, a, b, y, layout, n, stream);
    case Binary::GeluErfGrad: return binary(GeluErfGradOp{}, elem, a, b, y, layout, n, stream);
    case Binary::Maximum: return binary(MaximumOp{}, elem, a, b, y, layout, n, stream);
    case Binary::Minimum: return binary(MinimumOp{}, elem, a, b, y, layout, n, stream);
    case Binary::Pow: return binary(PowTensorOp{}, elem, a, b, y, layout, n, stream);
  }
}

}  // namespace merak::cuda_kernels
