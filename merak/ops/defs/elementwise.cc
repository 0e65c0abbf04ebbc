// Elementwise ops: broadcasting arithmetic, unary math, activations with their gradient helpers,
// comparisons, logical ops and selection, and dtype casts. Each op's forward (schema, inference,
// cost) and backward sit together; the kernels are in kernels/<device>/elementwise.cc.
#include <algorithm>

#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"
#include "merak/ops/sharding.h"

namespace merak::ops {
namespace {

// --- helpers shared by the definitions ---

bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const int64_t da = a[a.size() - i], db = b[b.size() - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

// The broadcast shape of two inputs, with an error that names them.
Shape broadcast_pair(const TensorMeta& a, const char* an, const TensorMeta& b, const char* bn) {
  MERAK_CHECK(broadcastable(a.shape, b.shape), an, " ", shape_str(a.shape), " and ", bn, " ",
              shape_str(b.shape), " do not broadcast");
  return broadcast_shapes(a.shape, b.shape);
}

void expect_same_dtype(const TensorMeta& a, const char* an, const TensorMeta& b, const char* bn) {
  MERAK_CHECK(a.dtype == b.dtype, an, " is ", dtype_name(a.dtype), " but ", bn, " is ",
              dtype_name(b.dtype));
}

// Sums a broadcast gradient back to an input's shape; no op at all when nothing was broadcast.
Tensor unbroadcast(const Tensor& g, const Shape& shape) {
  return g.shape() == shape ? g : sum_to(g, shape);
}

// Cost of an elementwise op: FLOPs per output element, every input and output moved once.
OpCost elementwise_cost(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
                        double fwd_per_element, double bwd_per_element) {
  OpCost c;
  const double n = double(out[0].numel());
  c.fwd_flops = fwd_per_element * n;
  c.bwd_flops = bwd_per_element * n;
  for (const auto& m : in)
    if (m.defined) c.bytes += double(m.nbytes());
  c.bytes += double(out[0].nbytes());
  return c;
}

CostFn cost_per_element(double fwd, double bwd) {
  return [fwd, bwd](const auto& in, const auto& out, const Attrs&) {
    return elementwise_cost(in, out, fwd, bwd);
  };
}

// Floating dtypes, or i32/i64 for the ops that also do integer arithmetic (add, sub, mul, div,
// neg, relu: shape values, which ONNX import folds through these ops).
void expect_arithmetic(const TensorMeta& m, const char* what) {
  if (m.dtype == DType::I32 || m.dtype == DType::I64) return;
  MERAK_CHECK(is_floating(m.dtype), what, " must be a floating dtype (f32, f64, bf16, f16) or ",
              "i32 or i64, got ", dtype_name(m.dtype));
}

std::vector<TensorMeta> infer_binary(const std::vector<TensorMeta>& in, const Attrs&) {
  expect_arithmetic(in[0], "a");
  expect_arithmetic(in[1], "b");
  expect_same_dtype(in[0], "a", in[1], "b");
  return {TensorMeta{broadcast_pair(in[0], "a", in[1], "b"), in[0].dtype}};
}

std::vector<TensorMeta> infer_unary(const std::vector<TensorMeta>& in, const Attrs&) {
  expect_floating(in[0], "x");
  return {in[0]};
}

std::vector<TensorMeta> infer_signed_unary(const std::vector<TensorMeta>& in, const Attrs&) {
  expect_arithmetic(in[0], "x");
  return {in[0]};
}

// (dy, other) -> dy's shape: the gradient helpers' inference.
std::vector<TensorMeta> infer_grad_helper(const std::vector<TensorMeta>& in, const char* other) {
  expect_floating(in[0], "dy");
  expect_floating(in[1], other);
  expect_same_dtype(in[0], "dy", in[1], other);
  MERAK_CHECK(in[0].shape == in[1].shape, "dy ", shape_str(in[0].shape), " and ", other, " ",
              shape_str(in[1].shape), " must have the same shape");
  return {in[0]};
}

// A binary broadcasting op a (op) b.
OpDef binary_def(const char* name, const char* doc, double bwd_flops) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.inputs = {"a", "b"};
  d.outputs = {"y"};
  d.infer = infer_binary;
  d.cost = cost_per_element(1, bwd_flops);
  d.sharding = broadcasting_sharding();
  return d;
}

// A unary op y = f(x).
OpDef unary_def(const char* name, const char* doc, double fwd_flops, double bwd_flops) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.infer = infer_unary;
  d.cost = cost_per_element(fwd_flops, bwd_flops);
  d.sharding = elementwise_sharding();
  return d;
}

// A binary op with a bool result and broadcasting (comparisons, logical ops); `check` vets the
// inputs' dtypes.
OpDef bool_result_def(const char* name, const char* doc,
                      void (*check)(const TensorMeta& a, const TensorMeta& b)) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.inputs = {"a", "b"};
  d.outputs = {"y"};
  d.infer = [check](const std::vector<TensorMeta>& in, const Attrs&) {
    check(in[0], in[1]);
    return std::vector<TensorMeta>{TensorMeta{broadcast_pair(in[0], "a", in[1], "b"), DType::Bool}};
  };
  d.cost = cost_per_element(1, 0);
  return d;
}

// A comparison a (op) b -> bool. 16-bit inputs are refused: the CUDA kernels compare f32, i32,
// i64 and bool (callers widen bf16 and f16 to f32 first, as ONNX folding does).
OpDef compare_def(const char* name, const char* doc) {
  return bool_result_def(name, doc, [](const TensorMeta& a, const TensorMeta& b) {
    expect_same_dtype(a, "a", b, "b");
    MERAK_CHECK(a.dtype != DType::BF16 && a.dtype != DType::F16, "a and b are ",
                dtype_name(a.dtype), ": compare f32, f64, i32, i64 or bool");
  });
}

// A logical op on two bool tensors -> bool.
OpDef logical_def(const char* name, const char* doc) {
  return bool_result_def(name, doc, [](const TensorMeta& a, const TensorMeta& b) {
    MERAK_CHECK(a.dtype == DType::Bool && b.dtype == DType::Bool, "a and b must be bool, ",
                "got ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
  });
}

// maximum/minimum's gradient goes to the input the output took; where a == b it is split evenly
// between them, as PyTorch does. `picks` (gt for maximum, lt for minimum) says where the first
// argument is taken. (A NaN output took neither: both get 0 there.)
std::vector<Tensor> extremum_backward(const BackwardCtx& c,
                                      Tensor (*picks)(const Tensor&, const Tensor&)) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor(), Tensor()};
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const Tensor half_tie = mul_scalar(cast(eq(a, b), g.dtype()), 0.5);
  Tensor da, db;
  if (c.needs_input_grad[0])
    da = unbroadcast(mul(g, add(cast(picks(a, b), g.dtype()), half_tie)), a.shape());
  if (c.needs_input_grad[1])
    db = unbroadcast(mul(g, add(cast(picks(b, a), g.dtype()), half_tie)), b.shape());
  return {da, db};
}

}  // namespace

// --- add: y = a + b; da, db = dy summed over broadcast dims ---
MERAK_REGISTER_OP(add) {
  OpDef d = binary_def("add", "a + b with NumPy broadcasting", 1);
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    return {c.needs_input_grad[0] ? unbroadcast(g, c.inputs[0].shape()) : Tensor(),
            c.needs_input_grad[1] ? unbroadcast(g, c.inputs[1].shape()) : Tensor()};
  };
  return d;
}

// --- sub: y = a - b; da = dy, db = -dy (each summed over broadcast dims) ---
MERAK_REGISTER_OP(sub) {
  OpDef d = binary_def("sub", "a - b with NumPy broadcasting", 1);
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    // Negate after reducing: the reduced gradient is the smaller one.
    return {c.needs_input_grad[0] ? unbroadcast(g, c.inputs[0].shape()) : Tensor(),
            c.needs_input_grad[1] ? neg(unbroadcast(g, c.inputs[1].shape())) : Tensor()};
  };
  return d;
}

// --- mul: y = a * b; da = dy * b, db = dy * a ---
MERAK_REGISTER_OP(mul) {
  OpDef d = binary_def("mul", "a * b with NumPy broadcasting", 2);
  d.saves_inputs = 0b11;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    const Tensor& a = c.inputs[0];
    const Tensor& b = c.inputs[1];
    return {c.needs_input_grad[0] ? unbroadcast(mul(g, b), a.shape()) : Tensor(),
            c.needs_input_grad[1] ? unbroadcast(mul(g, a), b.shape()) : Tensor()};
  };
  return d;
}

// --- div: y = a / b; da = dy / b, db = -dy * a / b^2 = -(dy / b) * y ---
MERAK_REGISTER_OP(div) {
  OpDef d = binary_def("div", "a / b with NumPy broadcasting (integers truncate toward zero)", 3);
  d.saves_inputs = 0b10;  // b
  d.saves_outputs = 1;    // y: db reuses dy / b instead of keeping a
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    const Tensor g_over_b = div(g, c.inputs[1]);
    return {c.needs_input_grad[0] ? unbroadcast(g_over_b, c.inputs[0].shape()) : Tensor(),
            c.needs_input_grad[1]
                ? neg(unbroadcast(mul(g_over_b, c.outputs[0]), c.inputs[1].shape()))
                : Tensor()};
  };
  return d;
}

// --- add_scalar: y = x + value; dx = dy ---
MERAK_REGISTER_OP(add_scalar) {
  OpDef d = unary_def("add_scalar", "x + value", 1, 0);
  d.attrs = {{"value", AttrKind::Float, std::nullopt}};
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> { return {c.grad_outputs[0]}; };
  return d;
}

// --- mul_scalar: y = x * value; dx = dy * value ---
MERAK_REGISTER_OP(mul_scalar) {
  OpDef d = unary_def("mul_scalar", "x * value", 1, 1);
  d.attrs = {{"value", AttrKind::Float, std::nullopt}};
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? mul_scalar(g, c.attrs.f("value")) : Tensor()};
  };
  return d;
}

// --- neg: y = -x; dx = -dy ---
MERAK_REGISTER_OP(neg) {
  OpDef d = unary_def("neg", "-x", 1, 1);
  d.infer = infer_signed_unary;  // integers wrap: -MIN is MIN
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? neg(g) : Tensor()};
  };
  return d;
}

// --- exp: y = e^x; dx = dy * y ---
MERAK_REGISTER_OP(exp) {
  OpDef d = unary_def("exp", "e^x", 10, 1);
  d.saves_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? mul(g, c.outputs[0]) : Tensor()};
  };
  return d;
}

// --- log: y = ln x; dx = dy / x ---
MERAK_REGISTER_OP(log) {
  OpDef d = unary_def("log", "natural logarithm of x", 10, 1);
  d.saves_inputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? div(g, c.inputs[0]) : Tensor()};
  };
  return d;
}

// --- sqrt: y = sqrt(x); dx = dy / (2 y) ---
MERAK_REGISTER_OP(sqrt) {
  OpDef d = unary_def("sqrt", "square root of x", 1, 2);
  d.saves_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? div(mul_scalar(g, 0.5), c.outputs[0]) : Tensor()};
  };
  return d;
}

// --- rsqrt: y = 1 / sqrt(x); dx = -dy * y^3 / 2 ---
MERAK_REGISTER_OP(rsqrt) {
  OpDef d = unary_def("rsqrt", "1 / sqrt(x)", 2, 4);
  d.saves_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? mul(g, mul_scalar(pow(c.outputs[0], 3.0), -0.5)) : Tensor()};
  };
  return d;
}

// --- pow: y = x^exponent; dx = dy * exponent * x^(exponent - 1) ---
MERAK_REGISTER_OP(pow) {
  OpDef d = unary_def("pow", "x raised to a constant exponent", 10, 12);
  d.attrs = {{"exponent", AttrKind::Float, std::nullopt}};
  d.saves_inputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const double e = c.attrs.f("exponent");
    if (e == 0) return {mul_scalar(g, 0.0)};  // x^0 is constant
    if (e == 1) return {g};
    return {mul(g, mul_scalar(pow(c.inputs[0], e - 1), e))};
  };
  return d;
}

// --- pow_tensor: y = a^b elementwise with broadcasting;
//     da = dy * b * a^(b - 1), db = dy * y * ln a (NaN where a < 0, as the real power is) ---
MERAK_REGISTER_OP(pow_tensor) {
  OpDef d = binary_def("pow_tensor", "a raised to b elementwise with NumPy broadcasting", 25);
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    expect_floating(in[0], "a");  // integer powers overflow: callers compute them in f64
    return infer_binary(in, a);
  };
  d.cost = cost_per_element(10, 25);
  d.saves_inputs = 0b11;
  d.saves_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    const Tensor &a = c.inputs[0], &b = c.inputs[1];
    Tensor da, db;
    if (c.needs_input_grad[0])
      da = unbroadcast(mul(g, mul(b, pow_tensor(a, add_scalar(b, -1)))), a.shape());
    if (c.needs_input_grad[1]) db = unbroadcast(mul(g, mul(c.outputs[0], log(a))), b.shape());
    return {da, db};
  };
  return d;
}

// --- maximum, minimum: the larger / smaller of a and b with broadcasting (NaN wins);
//     integers compare exactly ---
MERAK_REGISTER_OP(maximum) {
  OpDef d = binary_def("maximum", "max(a, b) elementwise with NumPy broadcasting; NaN wins", 4);
  d.saves_inputs = 0b11;
  d.backward = [](const BackwardCtx& c) { return extremum_backward(c, gt); };
  return d;
}
MERAK_REGISTER_OP(minimum) {
  OpDef d = binary_def("minimum", "min(a, b) elementwise with NumPy broadcasting; NaN wins", 4);
  d.saves_inputs = 0b11;
  d.backward = [](const BackwardCtx& c) { return extremum_backward(c, lt); };
  return d;
}

// --- abs: y = |x| (integers wrap: |MIN| is MIN); dx = dy * sign(x) (0 at x = 0) ---
MERAK_REGISTER_OP(abs) {
  OpDef d = unary_def("abs", "|x|", 1, 2);
  d.infer = infer_signed_unary;
  d.saves_inputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? mul(g, sign(c.inputs[0])) : Tensor()};
  };
  return d;
}

// --- sign, floor, ceil: piecewise constant, so not differentiable (no gradient flows) ---
MERAK_REGISTER_OP(sign) {
  OpDef d = unary_def("sign", "-1, 0 or 1 as x is negative, zero or positive; NaN stays", 1, 0);
  d.infer = infer_signed_unary;
  return d;
}
MERAK_REGISTER_OP(floor) { return unary_def("floor", "x rounded down to an integer", 1, 0); }
MERAK_REGISTER_OP(ceil) { return unary_def("ceil", "x rounded up to an integer", 1, 0); }

// --- tanh: y = tanh(x); dx = dy * (1 - y^2) ---
MERAK_REGISTER_OP(tanh) {
  OpDef d = unary_def("tanh", "hyperbolic tangent of x", 10, 3);
  d.saves_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const Tensor& y = c.outputs[0];
    return {sub(g, mul(g, mul(y, y)))};
  };
  return d;
}

// --- erf: y = erf(x); dx = dy * 2/sqrt(pi) * e^(-x^2) ---
MERAK_REGISTER_OP(erf) {
  OpDef d = unary_def("erf", "the error function of x", 15, 14);
  d.saves_inputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const Tensor& x = c.inputs[0];
    const double two_over_sqrt_pi = 1.12837916709551257390;
    return {mul(g, mul_scalar(exp(neg(mul(x, x))), two_over_sqrt_pi))};
  };
  return d;
}

// --- relu: y = max(x, 0); dx = relu_grad(dy, y) ---
MERAK_REGISTER_OP(relu) {
  OpDef d = unary_def("relu", "max(x, 0)", 1, 1);
  d.infer = infer_signed_unary;
  d.saves_outputs = 1;  // y > 0 exactly where x > 0
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? relu_grad(g, c.outputs[0]) : Tensor()};
  };
  return d;
}

// relu's backward: dy where y > 0, else 0.
MERAK_REGISTER_OP(relu_grad) {
  OpDef d;
  d.name = "relu_grad";
  d.doc = "relu's input gradient: dy where y > 0, else 0";
  d.inputs = {"dy", "y"};
  d.outputs = {"dx"};
  d.infer = [](const auto& in, const Attrs&) { return infer_grad_helper(in, "y"); };
  d.cost = cost_per_element(1, 0);
  return d;
}

// --- gelu: y = x * Phi(x) ("none": Phi the normal CDF, via erf) or GPT-2's tanh form
//     0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); dx = gelu_grad(dy, x) ---
MERAK_REGISTER_OP(gelu) {
  OpDef d = unary_def("gelu", "x * Phi(x), exactly (\"none\") or by GPT-2's tanh form", 20, 25);
  d.attrs = {{"approximate", AttrKind::String, std::string("tanh")}};
  d.infer = [](const auto& in, const Attrs& a) {
    check_gelu_mode(a.s("approximate"));
    return infer_unary(in, a);
  };
  d.saves_inputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? gelu_grad(g, c.inputs[0], c.attrs.s("approximate")) : Tensor()};
  };
  return d;
}

// gelu's backward: dy * d gelu(x) / dx in the same form as the forward.
MERAK_REGISTER_OP(gelu_grad) {
  OpDef d;
  d.name = "gelu_grad";
  d.doc = "gelu's input gradient: dy * gelu'(x)";
  d.inputs = {"dy", "x"};
  d.outputs = {"dx"};
  d.attrs = {{"approximate", AttrKind::String, std::string("tanh")}};
  d.infer = [](const auto& in, const Attrs& a) {
    check_gelu_mode(a.s("approximate"));
    return infer_grad_helper(in, "x");
  };
  d.cost = cost_per_element(25, 0);
  return d;
}

// --- comparisons: a (op) b elementwise with broadcasting, as bool; not differentiable ---
// Integers compare exactly; NaN compares false (unequal to everything, itself included).
MERAK_REGISTER_OP(eq) { return compare_def("eq", "a == b, broadcasting (bool)"); }
MERAK_REGISTER_OP(lt) { return compare_def("lt", "a < b, broadcasting (bool)"); }
MERAK_REGISTER_OP(gt) { return compare_def("gt", "a > b, broadcasting (bool)"); }
MERAK_REGISTER_OP(le) { return compare_def("le", "a <= b, broadcasting (bool)"); }
MERAK_REGISTER_OP(ge) { return compare_def("ge", "a >= b, broadcasting (bool)"); }

// --- logical ops on bool tensors with broadcasting; not differentiable ---
MERAK_REGISTER_OP(logical_and) {
  return logical_def("logical_and", "a and b (bool, broadcasting)");
}
MERAK_REGISTER_OP(logical_or) {
  return logical_def("logical_or", "a or b (bool, broadcasting)");
}
MERAK_REGISTER_OP(logical_xor) {
  return logical_def("logical_xor", "a xor b (bool, broadcasting)");
}

// --- where: y = cond ? a : b with broadcasting; da = dy where cond, db = dy where !cond ---
MERAK_REGISTER_OP(where) {
  OpDef d;
  d.name = "where";
  d.doc = "cond ? a : b elementwise with NumPy broadcasting over all three";
  d.inputs = {"cond", "a", "b"};
  d.outputs = {"y"};
  d.infer = [](const auto& in, const Attrs&) {
    MERAK_CHECK(in[0].dtype == DType::Bool, "cond must be bool, got ", dtype_name(in[0].dtype));
    // Any dtype: selection does no arithmetic (integer and bool values are masks and shapes).
    expect_same_dtype(in[1], "a", in[2], "b");
    const TensorMeta ab{broadcast_pair(in[1], "a", in[2], "b"), in[1].dtype};
    MERAK_CHECK(broadcastable(in[0].shape, ab.shape), "cond ", shape_str(in[0].shape),
                " does not broadcast with a and b's shape ", shape_str(ab.shape));
    return std::vector<TensorMeta>{TensorMeta{broadcast_shapes(in[0].shape, ab.shape), ab.dtype}};
  };
  d.cost = cost_per_element(1, 2);
  d.sharding = broadcasting_sharding();
  d.saves_inputs = 1;  // cond
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor& cond = c.inputs[0];
    Tensor da, db;
    if (c.needs_input_grad[1]) {
      // The zeros come from an op on cond rather than a constant tensor, so the formula runs on
      // any device and traces; they are cond-sized, usually far smaller than dy.
      const Tensor zeros = mul_scalar(cast(cond, g.dtype()), 0.0);
      da = unbroadcast(where(cond, g, zeros), c.inputs[1].shape());
    }
    if (c.needs_input_grad[2]) db = unbroadcast(masked_fill(g, cond, 0.0), c.inputs[2].shape());
    return {Tensor(), da, db};
  };
  return d;
}

// --- masked_fill: y = mask ? value : x (mask broadcasts to x); dx = dy where !mask ---
MERAK_REGISTER_OP(masked_fill) {
  OpDef d;
  d.name = "masked_fill";
  d.doc = "x with the elements where mask (broadcast to x) is true set to value";
  d.inputs = {"x", "mask"};
  d.outputs = {"y"};
  d.attrs = {{"value", AttrKind::Float, std::nullopt}};
  d.infer = [](const auto& in, const Attrs&) {
    expect_floating(in[0], "x");
    MERAK_CHECK(in[1].dtype == DType::Bool, "mask must be bool, got ", dtype_name(in[1].dtype));
    MERAK_CHECK(broadcastable(in[0].shape, in[1].shape) &&
                    broadcast_shapes(in[0].shape, in[1].shape) == in[0].shape,
                "mask ", shape_str(in[1].shape), " does not broadcast to x ",
                shape_str(in[0].shape));
    return std::vector<TensorMeta>{in[0]};
  };
  d.cost = cost_per_element(1, 1);
  d.sharding = broadcasting_sharding();
  d.saves_inputs = 0b10;  // mask
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? masked_fill(g, c.inputs[1], 0.0) : Tensor(), Tensor()};
  };
  return d;
}

// --- cast: y = x converted to dtype; dx = dy cast back when both dtypes are floating ---
// Float -> int truncates toward zero (NaN -> 0, out of range saturates); bf16/f16 round to
// nearest even through f32; -> bool is x != 0.
MERAK_REGISTER_OP(cast) {
  OpDef d;
  d.name = "cast";
  d.doc = "x converted to dtype (f32, f64, bf16, f16, i32, i64, bool)";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"dtype", AttrKind::String, std::nullopt}};
  d.infer = [](const auto& in, const Attrs& a) {
    return std::vector<TensorMeta>{TensorMeta{in[0].shape, dtype_from_name(a.s("dtype"))}};
  };
  d.cost = cost_per_element(1, 1);
  d.sharding = elementwise_sharding();
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    const DType in_dtype = c.inputs[0].dtype();
    if (!g.defined() || !is_floating(in_dtype) || !is_floating(g.dtype())) return {Tensor()};
    return {g.dtype() == in_dtype ? g : cast(g, in_dtype)};
  };
  return d;
}

// --- the typed API ---

Tensor add(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("add");
  return call1(op, {a, b});
}
Tensor sub(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("sub");
  return call1(op, {a, b});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("mul");
  return call1(op, {a, b});
}
Tensor div(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("div");
  return call1(op, {a, b});
}
Tensor add_scalar(const Tensor& x, double value) {
  static const OpDef& op = def("add_scalar");
  return call1(op, {x}, Attrs().set("value", value));
}
Tensor mul_scalar(const Tensor& x, double value) {
  static const OpDef& op = def("mul_scalar");
  return call1(op, {x}, Attrs().set("value", value));
}
Tensor neg(const Tensor& x) {
  static const OpDef& op = def("neg");
  return call1(op, {x});
}
Tensor exp(const Tensor& x) {
  static const OpDef& op = def("exp");
  return call1(op, {x});
}
Tensor log(const Tensor& x) {
  static const OpDef& op = def("log");
  return call1(op, {x});
}
Tensor sqrt(const Tensor& x) {
  static const OpDef& op = def("sqrt");
  return call1(op, {x});
}
Tensor rsqrt(const Tensor& x) {
  static const OpDef& op = def("rsqrt");
  return call1(op, {x});
}
Tensor pow(const Tensor& x, double exponent) {
  static const OpDef& op = def("pow");
  return call1(op, {x}, Attrs().set("exponent", exponent));
}
Tensor tanh(const Tensor& x) {
  static const OpDef& op = def("tanh");
  return call1(op, {x});
}
Tensor erf(const Tensor& x) {
  static const OpDef& op = def("erf");
  return call1(op, {x});
}
Tensor relu(const Tensor& x) {
  static const OpDef& op = def("relu");
  return call1(op, {x});
}
Tensor relu_grad(const Tensor& dy, const Tensor& y) {
  static const OpDef& op = def("relu_grad");
  return call1(op, {dy, y});
}
Tensor gelu(const Tensor& x, const std::string& approximate) {
  static const OpDef& op = def("gelu");
  return call1(op, {x}, Attrs().set("approximate", approximate));
}
Tensor gelu_grad(const Tensor& dy, const Tensor& x, const std::string& approximate) {
  static const OpDef& op = def("gelu_grad");
  return call1(op, {dy, x}, Attrs().set("approximate", approximate));
}
Tensor eq(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("eq");
  return call1(op, {a, b});
}
Tensor lt(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("lt");
  return call1(op, {a, b});
}
Tensor gt(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("gt");
  return call1(op, {a, b});
}
Tensor le(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("le");
  return call1(op, {a, b});
}
Tensor ge(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("ge");
  return call1(op, {a, b});
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("logical_and");
  return call1(op, {a, b});
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("logical_or");
  return call1(op, {a, b});
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("logical_xor");
  return call1(op, {a, b});
}
Tensor pow_tensor(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("pow_tensor");
  return call1(op, {a, b});
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("maximum");
  return call1(op, {a, b});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("minimum");
  return call1(op, {a, b});
}
Tensor abs(const Tensor& x) {
  static const OpDef& op = def("abs");
  return call1(op, {x});
}
Tensor sign(const Tensor& x) {
  static const OpDef& op = def("sign");
  return call1(op, {x});
}
Tensor floor(const Tensor& x) {
  static const OpDef& op = def("floor");
  return call1(op, {x});
}
Tensor ceil(const Tensor& x) {
  static const OpDef& op = def("ceil");
  return call1(op, {x});
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  static const OpDef& op = def("where");
  return call1(op, {cond, a, b});
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  static const OpDef& op = def("masked_fill");
  return call1(op, {x, mask}, Attrs().set("value", value));
}
Tensor cast(const Tensor& x, DType dtype) {
  static const OpDef& op = def("cast");
  return call1(op, {x}, Attrs().set("dtype", dtype_name(dtype)));
}

}  // namespace merak::ops
