// Launchers of the arithmetic, math and activation kernels (pointwise.cu). Elements are f32,
// bf16 or f16 (`elem`, common.h's Elem), computed in f32 and rounded once when stored.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise/strided.h"

namespace merak::cuda_kernels {

enum class Unary : int {
  AddScalar,  // x + param
  MulScalar,  // x * param
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Erf,
  Relu,
  GeluTanh,
  GeluErf,
  // pow: the exponents with exact forms (1, 2, 3, -1, -2; 0.5 and -0.5 are Sqrt and Rsqrt),
  // then powf(x, param)
  Copy,
  Square,
  Cube,
  Reciprocal,
  InvSquare,
  Pow,
  Abs,
  Sign,  // NaN stays NaN
  Floor,
  Ceil,
};

// y[i] = f(x[i]) for i < n; `param` is the scalar of add_scalar/mul_scalar or pow's exponent.
void launch_unary(Unary op, int elem, const void* x, void* y, int64_t n, float param,
                  cudaStream_t stream);

enum class Binary : int {
  Add,
  Sub,
  Mul,
  Div,
  ReluGrad,
  GeluTanhGrad,
  GeluErfGrad,
  Maximum,  // NaN on either side wins
  Minimum,
  Pow,  // a^b
};

// y[i] = f(a, b) over the layout's n elements (operand 0 is a, 1 is b). The gradient helpers
// take (dy, y) for ReluGrad and (dy, x) for the GELU ones.
void launch_binary(Binary op, int elem, const void* a, const void* b, void* y,
                   const StridedLayout& layout, int64_t n, cudaStream_t stream);

}  // namespace merak::cuda_kernels
