// CUDA kernels of the elementwise ops (merak/ops/defs/elementwise.cc): arithmetic with
// broadcasting, unary math, activations and their gradient helpers, comparisons, logical ops,
// where, masked_fill and cast. Floating ops take f32, bf16 and f16 (f64 is CPU-only: elem_of names
// the op and tensor).
#include <vector>

#include "kernels/cuda/common.h"
#include "kernels/cuda/elementwise/cast.h"
#include "kernels/cuda/elementwise/layout.h"
#include "kernels/cuda/elementwise/pointwise.h"
#include "kernels/cuda/elementwise/select.h"
#include "merak/ops/op_util.h"

namespace merak::cuda_kernels {
namespace {

using ops::Attrs;
using Tensors = std::vector<Tensor>;

std::vector<Shape> shapes_of(const Tensors& in) {
  std::vector<Shape> s;
  for (const Tensor& t : in) s.push_back(t.shape());
  return s;
}

void unary(const char* name, Unary op, const Tensors& in, const Tensors& out, float param = 0) {
  const Elem e = elem_of(in[0], name);
  if (out[0].numel() == 0) return;
  launch_unary(op, int(e), in[0].device_data(), out[0].device_data(), out[0].numel(), param,
               stream_of(out[0]));
  check_launch(name);
}

// Binary ops and the gradient helpers (whose inputs have one shape: a flat layout).
void binary(const char* name, Binary op, const Tensors& in, const Tensors& out) {
  const Tensor& y = out[0];
  const Elem e = elem_of(in[0], name);
  if (y.numel() == 0) return;
  launch_binary(op, int(e), in[0].device_data(), in[1].device_data(), y.device_data(),
                broadcast_layout(name, y.shape(), shapes_of(in)), y.numel(), stream_of(y));
  check_launch(name);
}

// gelu and gelu_grad's form: "tanh" (GPT-2's) or "none" (exact, via erf).
bool gelu_exact(const Attrs& a) { return a.s("approximate") == "none"; }

Scalar scalar_of(const Tensor& t, const char* what) {
  switch (t.dtype()) {
    case DType::F32: return Scalar::F32;
    case DType::BF16: return Scalar::BF16;
    case DType::F16: return Scalar::F16;
    case DType::I32: return Scalar::I32;
    case DType::I64: return Scalar::I64;
    case DType::Bool: return Scalar::Bool;
    default:
      MERAK_FAIL("cast: the CUDA kernel converts between f32, bf16, f16, i32, i64 and bool; ",
                 what, " is ", t.str());
  }
}

EqType eq_type_of(const Tensor& t, const char* name) {
  switch (t.dtype()) {
    case DType::F32: return EqType::F32;
    case DType::I32: return EqType::I32;
    case DType::I64: return EqType::I64;
    case DType::Bool: return EqType::Bool;
    default: MERAK_FAIL(name, ": the CUDA kernel compares f32, i32, i64 or bool, got a ", t.str());
  }
}

void compare(const char* name, Compare op, const Tensors& in, const Tensors& out) {
  const Tensor& y = out[0];
  const EqType type = eq_type_of(in[0], name);
  if (y.numel() == 0) return;
  launch_compare(op, type, in[0].device_data(), in[1].device_data(),
                 static_cast<bool*>(y.device_data()),
                 broadcast_layout(name, y.shape(), shapes_of(in)), y.numel(), stream_of(y));
  check_launch(name);
}

// Bool inputs (the definitions check).
void logical(const char* name, Logical op, const Tensors& in, const Tensors& out) {
  const Tensor& y = out[0];
  if (y.numel() == 0) return;
  launch_logical(op, static_cast<const bool*>(in[0].device_data()),
                 static_cast<const bool*>(in[1].device_data()),
                 static_cast<bool*>(y.device_data()),
                 broadcast_layout(name, y.shape(), shapes_of(in)), y.numel(), stream_of(y));
  check_launch(name);
}

#define MERAK_CUDA_UNARY(name, op)                                                      \
  MERAK_REGISTER_KERNEL(name, CUDA, [](const Tensors& in, const Tensors& out, const Attrs&) { \
    unary(#name, op, in, out);                                                          \
  })

#define MERAK_CUDA_BINARY(name, op)                                                     \
  MERAK_REGISTER_KERNEL(name, CUDA, [](const Tensors& in, const Tensors& out, const Attrs&) { \
    binary(#name, op, in, out);                                                         \
  })

}  // namespace

// --- arithmetic ---

MERAK_CUDA_BINARY(add, Binary::Add);
MERAK_CUDA_BINARY(sub, Binary::Sub);
MERAK_CUDA_BINARY(mul, Binary::Mul);
MERAK_CUDA_BINARY(div, Binary::Div);
MERAK_CUDA_BINARY(maximum, Binary::Maximum);  // NaN wins
MERAK_CUDA_BINARY(minimum, Binary::Minimum);
MERAK_CUDA_BINARY(pow_tensor, Binary::Pow);

// The scalar is rounded to f32 first, as the CPU's scalar_t(value).
MERAK_REGISTER_KERNEL(add_scalar, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  unary("add_scalar", Unary::AddScalar, in, out, float(a.f("value")));
});
MERAK_REGISTER_KERNEL(mul_scalar, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  unary("mul_scalar", Unary::MulScalar, in, out, float(a.f("value")));
});
MERAK_CUDA_UNARY(neg, Unary::Neg);
MERAK_CUDA_UNARY(abs, Unary::Abs);
MERAK_CUDA_UNARY(sign, Unary::Sign);  // NaN stays NaN
MERAK_CUDA_UNARY(floor, Unary::Floor);
MERAK_CUDA_UNARY(ceil, Unary::Ceil);

// --- unary math ---

MERAK_CUDA_UNARY(exp, Unary::Exp);  // results below e^-87.33 (subnormal) flush to 0
MERAK_CUDA_UNARY(log, Unary::Log);
MERAK_CUDA_UNARY(sqrt, Unary::Sqrt);
MERAK_CUDA_UNARY(rsqrt, Unary::Rsqrt);
MERAK_CUDA_UNARY(tanh, Unary::Tanh);
MERAK_CUDA_UNARY(erf, Unary::Erf);

// The exponents with exact forms, as on the CPU; the rest powf.
MERAK_REGISTER_KERNEL(pow, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  const double e = a.f("exponent");
  const Unary op = e == 1      ? Unary::Copy
                   : e == 2    ? Unary::Square
                   : e == 3    ? Unary::Cube
                   : e == 0.5  ? Unary::Sqrt
                   : e == -0.5 ? Unary::Rsqrt
                   : e == -1   ? Unary::Reciprocal
                   : e == -2   ? Unary::InvSquare
                               : Unary::Pow;
  unary("pow", op, in, out, float(e));
});

// --- activations and their gradients ---

MERAK_CUDA_UNARY(relu, Unary::Relu);  // NaN stays NaN
MERAK_CUDA_BINARY(relu_grad, Binary::ReluGrad);

MERAK_REGISTER_KERNEL(gelu, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  unary("gelu", gelu_exact(a) ? Unary::GeluErf : Unary::GeluTanh, in, out);
});
MERAK_REGISTER_KERNEL(gelu_grad, CUDA, [](const Tensors& in, const Tensors& out, const Attrs& a) {
  binary("gelu_grad", gelu_exact(a) ? Binary::GeluErfGrad : Binary::GeluTanhGrad, in, out);
});

// --- comparison and selection ---

#define MERAK_CUDA_COMPARE(name, op)                                                    \
  MERAK_REGISTER_KERNEL(name, CUDA, [](const Tensors& in, const Tensors& out, const Attrs&) { \
    compare(#name, op, in, out);                                                        \
  })

MERAK_CUDA_COMPARE(eq, Compare::Eq);
MERAK_CUDA_COMPARE(lt, Compare::Lt);
MERAK_CUDA_COMPARE(gt, Compare::Gt);
MERAK_CUDA_COMPARE(le, Compare::Le);
MERAK_CUDA_COMPARE(ge, Compare::Ge);

#define MERAK_CUDA_LOGICAL(name, op)                                                    \
  MERAK_REGISTER_KERNEL(name, CUDA, [](const Tensors& in, const Tensors& out, const Attrs&) { \
    logical(#name, op, in, out);                                                        \
  })

MERAK_CUDA_LOGICAL(logical_and, Logical::And);
MERAK_CUDA_LOGICAL(logical_or, Logical::Or);
MERAK_CUDA_LOGICAL(logical_xor, Logical::Xor);

MERAK_REGISTER_KERNEL(where, CUDA, [](const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& y = out[0];
  const Elem e = elem_of(in[1], "where");
  if (y.numel() == 0) return;
  launch_where(int(e), static_cast<const bool*>(in[0].device_data()), in[1].device_data(),
               in[2].device_data(), y.device_data(),
               broadcast_layout("where", y.shape(), shapes_of(in)), y.numel(), stream_of(y));
  check_launch("where");
});

MERAK_REGISTER_KERNEL(masked_fill, CUDA, [](const Tensors& in, const Tensors& out,
                                            const Attrs& a) {
  const Tensor& y = out[0];
  const Elem e = elem_of(in[0], "masked_fill");
  if (y.numel() == 0) return;
  launch_masked_fill(int(e), in[0].device_data(), static_cast<const bool*>(in[1].device_data()),
                     float(a.f("value")), y.device_data(),
                     broadcast_layout("masked_fill", y.shape(), shapes_of(in)), y.numel(),
                     stream_of(y));
  check_launch("masked_fill");
});

// --- cast ---

MERAK_REGISTER_KERNEL(cast, CUDA, [](const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor &x = in[0], &y = out[0];
  if (x.dtype() == y.dtype()) {  // any dtype, f64 included: the bytes as they are
    if (x.numel() > 0) {
      merak::cuda::check(cudaMemcpyAsync(y.device_data(), x.device_data(), size_t(x.nbytes()),
                                         cudaMemcpyDeviceToDevice, stream_of(y)),
                         "cast: cudaMemcpyAsync");
    }
    return;
  }
  const Scalar from = scalar_of(x, "x"), to = scalar_of(y, "the target");
  if (x.numel() == 0) return;
  launch_cast(from, to, x.device_data(), y.device_data(), x.numel(), stream_of(y));
  check_launch("cast");
});

}  // namespace merak::cuda_kernels
