// Constants are small (shape vectors, masks), so the folder favours plain loops over speed:
// every result is a fresh contiguous tensor, elements read and written through double (floating
// dtypes) or int64 (integer and bool dtypes) so one loop serves every dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>

#include "merak/graph/onnx_fold_internal.h"
#include "merak/graph/onnx_proto_internal.h"
#include "merak/graph/onnx_shapes_internal.h"

namespace merak::graph::onnx_detail {
namespace {

using Inputs = std::vector<Tensor>;

Tensor fresh(const Shape& shape, DType dtype) {
  checked_numel(shape, kMaxConstantBytes / int64_t(dtype_size(dtype)), "folded constant");
  return Tensor::empty(shape, dtype);
}

void put_double(const Tensor& t, int64_t i, double v) {
  void* p = t.raw_data();
  switch (t.dtype()) {
    case DType::F32: static_cast<float*>(p)[i] = float(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v)); break;
    case DType::Bool: static_cast<bool*>(p)[i] = v != 0; break;
    case DType::I64: static_cast<int64_t*>(p)[i] = saturating_int(v); break;
    case DType::I32:
      static_cast<int32_t*>(p)[i] = int32_t(uint32_t(uint64_t(saturating_int(v))));
      break;
  }
}

void put_int(const Tensor& t, int64_t i, int64_t v) {
  void* p = t.raw_data();
  switch (t.dtype()) {
    case DType::I64: static_cast<int64_t*>(p)[i] = v; break;
    case DType::I32: static_cast<int32_t*>(p)[i] = int32_t(uint32_t(uint64_t(v))); break;
    case DType::Bool: static_cast<bool*>(p)[i] = v != 0; break;
    default: put_double(t, i, double(v));
  }
}

const Tensor& need(const Inputs& in, size_t i, const char* what) {
  MERAK_CHECK(i < in.size() && in[i].defined(), "input ", i, " (", what, ") is missing");
  return in[i];
}

// `x` broadcast to `shape` as a contiguous tensor.
Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  checked_numel(shape, kMaxConstantBytes / int64_t(dtype_size(x.dtype())), "folded constant");
  return x.expand(shape).contiguous();
}

// --- elementwise ---

using IntFn = std::function<int64_t(int64_t, int64_t)>;
using FloatFn = std::function<double(double, double)>;

// Wrapping integer arithmetic: a hostile file must not reach signed overflow.
int64_t wrap_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
int64_t wrap_sub(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }
int64_t checked_div(int64_t a, int64_t b) {
  MERAK_CHECK(b != 0, "integer division by zero");
  MERAK_CHECK(!(a == INT64_MIN && b == -1), "integer division overflows");
  return a / b;
}

// a (op) b with broadcasting; the result has `out_dtype`. Integer and bool inputs compute with
// `fi` when given, else everything goes through `ff` in double.
Tensor binary(const Tensor& a, const Tensor& b, DType out_dtype, const IntFn& fi,
              const FloatFn& ff) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  const Tensor x = broadcast_to(a, shape), y = broadcast_to(b, shape);
  Tensor out = fresh(shape, out_dtype);
  const bool integral = !is_floating(a.dtype()) && !is_floating(b.dtype()) && fi;
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (integral) {
      put_int(out, i, fi(element_as_int(x, i), element_as_int(y, i)));
    } else {
      put_double(out, i, ff(element_as_double(x, i), element_as_double(y, i)));
    }
  }
  return out;
}

Tensor unary(const Tensor& a, const std::function<double(double)>& ff,
             const std::function<int64_t(int64_t)>& fi = nullptr) {
  Tensor out = fresh(a.shape(), a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (fi && !is_floating(a.dtype())) {
      put_int(out, i, fi(element_as_int(a, i)));
    } else {
      put_double(out, i, ff(element_as_double(a, i)));
    }
  }
  return out;
}

bool fold_binary(const std::string& op, const Inputs& in, Tensor& out) {
  static const std::map<std::string, std::pair<IntFn, FloatFn>> arith = {
      {"Add", {wrap_add, [](double a, double b) { return a + b; }}},
      {"Sub", {wrap_sub, [](double a, double b) { return a - b; }}},
      {"Mul", {wrap_mul, [](double a, double b) { return a * b; }}},
      {"Div", {checked_div, [](double a, double b) { return a / b; }}},
      {"Max",
       {[](int64_t a, int64_t b) { return std::max(a, b); },
        [](double a, double b) { return a != a || b != b ? NAN : std::max(a, b); }}},
      {"Min",
       {[](int64_t a, int64_t b) { return std::min(a, b); },
        [](double a, double b) { return a != a || b != b ? NAN : std::min(a, b); }}},
      {"Pow", {nullptr, [](double a, double b) { return std::pow(a, b); }}},
  };
  static const std::map<std::string, std::function<bool(double, double)>> compare = {
      {"Equal", std::equal_to<double>()},
      {"Less", std::less<double>()},
      {"Greater", std::greater<double>()},
      {"LessOrEqual", std::less_equal<double>()},
      {"GreaterOrEqual", std::greater_equal<double>()},
  };
  static const std::map<std::string, std::function<bool(bool, bool)>> logic = {
      {"And", std::logical_and<bool>()},
      {"Or", std::logical_or<bool>()},
      {"Xor", [](bool a, bool b) { return a != b; }},
  };
  if (auto it = arith.find(op); it != arith.end()) {
    const Tensor &a = need(in, 0, "A"), &b = need(in, 1, "B");
    if (op != "Pow")
      MERAK_CHECK(a.dtype() == b.dtype(), "inputs are ", dtype_name(a.dtype()), " and ",
                  dtype_name(b.dtype()));
    out = binary(a, b, a.dtype(), it->second.first, it->second.second);
    // Max and Min take any number of inputs.
    for (size_t i = 2; (op == "Max" || op == "Min") && i < in.size(); ++i) {
      MERAK_CHECK(need(in, i, "data").dtype() == a.dtype(), "inputs differ in dtype");
      out = binary(out, in[i], a.dtype(), it->second.first, it->second.second);
    }
    return true;
  }
  if (auto it = compare.find(op); it != compare.end()) {
    const Tensor &a = need(in, 0, "A"), &b = need(in, 1, "B");
    MERAK_CHECK(a.dtype() == b.dtype(), "inputs are ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()));
    const auto f = it->second;
    // Integers compare exactly (as int64), not through double.
    out = binary(
        a, b, DType::Bool,
        [f](int64_t x, int64_t y) {
          return int64_t(f(x < y ? -1.0 : x > y ? 1.0 : 0.0, 0.0));
        },
        [f](double x, double y) { return f(x, y) ? 1.0 : 0.0; });
    return true;
  }
  if (auto it = logic.find(op); it != logic.end()) {
    const Tensor &a = need(in, 0, "A"), &b = need(in, 1, "B");
    MERAK_CHECK(a.dtype() == DType::Bool && b.dtype() == DType::Bool, op, " needs bool inputs");
    const auto f = it->second;
    out = binary(
        a, b, DType::Bool, [f](int64_t x, int64_t y) { return int64_t(f(x, y)); }, nullptr);
    return true;
  }
  return false;
}

bool fold_unary(const std::string& op, const Inputs& in, Tensor& out) {
  static const std::map<std::string, std::function<double(double)>> floating = {
      {"Neg", [](double x) { return -x; }},
      {"Abs", [](double x) { return std::fabs(x); }},
      {"Sqrt", [](double x) { return std::sqrt(x); }},
      {"Floor", [](double x) { return std::floor(x); }},
      {"Ceil", [](double x) { return std::ceil(x); }},
      {"Reciprocal", [](double x) { return 1.0 / x; }},
      {"Exp", [](double x) { return std::exp(x); }},
      {"Log", [](double x) { return std::log(x); }},
      {"Erf", [](double x) { return std::erf(x); }},
      {"Tanh", [](double x) { return std::tanh(x); }},
      {"Relu", [](double x) { return x > 0 ? x : 0.0; }},
      {"Sign", [](double x) { return double((x > 0) - (x < 0)); }},
  };
  if (op == "Not") {
    const Tensor& x = need(in, 0, "X");
    MERAK_CHECK(x.dtype() == DType::Bool, "Not needs a bool input");
    out = unary(x, nullptr, [](int64_t v) { return int64_t(v == 0); });
    return true;
  }
  auto it = floating.find(op);
  if (it == floating.end()) return false;
  const Tensor& x = need(in, 0, "X");
  std::function<int64_t(int64_t)> fi;
  if (op == "Neg") fi = [](int64_t v) { return wrap_sub(0, v); };
  if (op == "Abs") fi = [](int64_t v) { return v < 0 ? wrap_sub(0, v) : v; };
  if (op == "Relu") fi = [](int64_t v) { return std::max<int64_t>(v, 0); };
  if (op == "Sign") fi = [](int64_t v) { return int64_t((v > 0) - (v < 0)); };
  if (!fi) MERAK_CHECK(is_floating(x.dtype()), op, " needs a floating input");
  out = unary(x, it->second, fi);
  return true;
}

Tensor cast(const Tensor& x, DType to) {
  Tensor out = fresh(x.shape(), to);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (is_floating(to)) {
      put_double(out, i, element_as_double(x, i));
    } else if (to == DType::Bool) {
      put_int(out, i, element_as_double(x, i) != 0);
    } else {
      put_int(out, i, element_as_int(x, i));
    }
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  MERAK_CHECK(cond.dtype() == DType::Bool, "condition must be bool");
  MERAK_CHECK(a.dtype() == b.dtype(), "X and Y are ", dtype_name(a.dtype()), " and ",
              dtype_name(b.dtype()));
  const Shape shape = broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape()));
  const Tensor c = broadcast_to(cond, shape), x = broadcast_to(a, shape),
               y = broadcast_to(b, shape);
  Tensor out = fresh(shape, a.dtype());
  const size_t bytes = dtype_size(a.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const Tensor& src = element_as_int(c, i) ? x : y;
    std::memcpy(static_cast<char*>(out.raw_data()) + size_t(i) * bytes,
                static_cast<const char*>(src.raw_data()) + size_t(i) * bytes, bytes);
  }
  return out;
}

// --- shape ops, through views of the input ---

// Axes from the input at `index` when present (opset 13+), else from the attribute.
std::vector<int64_t> axes_of(const onnx::NodeProto& node, const Inputs& in, size_t index) {
  if (index < in.size() && in[index].defined()) return int_values(in[index], "axes");
  return attr_ints(node, "axes", {});
}

Tensor gather(const Tensor& data, const Tensor& indices, int64_t axis_attr) {
  MERAK_CHECK(data.dim() >= 1, "Gather needs data of rank >= 1");
  const int64_t axis = onnx_axis(axis_attr, data.dim(), "axis");
  const int64_t n = data.size(axis);
  const std::vector<int64_t> idx = [&] {
    MERAK_CHECK(indices.dtype() == DType::I64 || indices.dtype() == DType::I32,
                "indices must be int32 or int64");
    std::vector<int64_t> v(size_t(indices.numel()));
    for (int64_t i = 0; i < indices.numel(); ++i) v[size_t(i)] = element_as_int(indices, i);
    return v;
  }();
  Shape shape(data.shape().begin(), data.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), data.shape().begin() + axis + 1, data.shape().end());
  Tensor out = fresh(shape, data.dtype());
  // The output viewed with the index dims flattened into one.
  Shape flat = data.shape();
  flat[size_t(axis)] = int64_t(idx.size());
  const Tensor out_flat = out.view(flat);
  for (size_t j = 0; j < idx.size(); ++j) {
    const int64_t k = idx[j] < 0 ? idx[j] + n : idx[j];
    MERAK_CHECK(k >= 0 && k < n, "index ", idx[j], " is out of range for a dim of ", n);
    out_flat.narrow(axis, int64_t(j), 1).copy_(data.narrow(axis, k, 1));
  }
  return out;
}

Tensor concat(const Inputs& in, int64_t axis_attr) {
  MERAK_CHECK(!in.empty() && in[0].defined(), "Concat has no inputs");
  const Tensor& first = in[0];
  MERAK_CHECK(first.dim() >= 1, "Concat of scalars");
  const int64_t axis = onnx_axis(axis_attr, first.dim(), "axis");
  Shape shape = first.shape();
  shape[size_t(axis)] = 0;
  for (const Tensor& x : in) {
    MERAK_CHECK(x.defined() && x.dtype() == first.dtype() && x.dim() == first.dim(),
                "Concat inputs differ in dtype or rank");
    for (int64_t d = 0; d < x.dim(); ++d)
      MERAK_CHECK(d == axis || x.size(d) == first.size(d), "Concat input ", shape_str(x.shape()),
                  " does not match ", shape_str(first.shape()));
    shape[size_t(axis)] += x.size(axis);
  }
  Tensor out = fresh(shape, first.dtype());
  int64_t at = 0;
  for (const Tensor& x : in) {
    out.narrow(axis, at, x.size(axis)).copy_(x);
    at += x.size(axis);
  }
  return out;
}

Tensor slice(const onnx::NodeProto& node, const Inputs& in) {
  const Tensor& data = need(in, 0, "data");
  std::vector<int64_t> starts, ends, axes, steps;
  if (in.size() > 1) {  // opset 10+: bounds are inputs
    starts = int_values(need(in, 1, "starts"), "starts");
    ends = int_values(need(in, 2, "ends"), "ends");
    if (in.size() > 3 && in[3].defined()) axes = int_values(in[3], "axes");
    if (in.size() > 4 && in[4].defined()) steps = int_values(in[4], "steps");
  } else {
    starts = attr_ints(node, "starts", {});
    ends = attr_ints(node, "ends", {});
    axes = attr_ints(node, "axes", {});
  }
  Shape shape = data.shape(), strides = data.strides();
  int64_t offset = 0;
  for (const SliceAxis& s : slice_axes(data.shape(), starts, ends, axes, steps)) {
    MERAK_CHECK(s.step > 0, "negative slice steps are not supported");
    const size_t a = size_t(s.axis);
    offset += s.start * strides[a];
    shape[a] = s.count;
    strides[a] *= s.step;
  }
  return data.as_strided(shape, strides, data.impl().offset + offset).clone();
}

Tensor constant_of_shape(const onnx::NodeProto& node, const Inputs& in) {
  const Shape shape = int_values(need(in, 0, "shape"), "shape");
  const auto* value = find_attr(node, "value");
  Tensor fill = Tensor::scalar(0.0);
  if (value) {
    MERAK_CHECK(value->type() == onnx::AttributeProto::TENSOR, "value is not a tensor");
    fill = tensor_from_onnx(value->t(), 8);
    MERAK_CHECK(fill.numel() == 1, "value must hold one element");
  }
  Tensor out = fresh(shape, fill.dtype());
  const size_t bytes = dtype_size(fill.dtype());
  for (int64_t i = 0; i < out.numel(); ++i)
    std::memcpy(static_cast<char*>(out.raw_data()) + size_t(i) * bytes, fill.raw_data(), bytes);
  return out;
}

Tensor range(const Inputs& in) {
  const Tensor &start = need(in, 0, "start"), &limit = need(in, 1, "limit"),
               &delta = need(in, 2, "delta");
  MERAK_CHECK(start.numel() == 1 && limit.numel() == 1 && delta.numel() == 1,
              "start, limit and delta must be scalars");
  const DType dtype = start.dtype();
  const double s = element_as_double(start, 0), l = element_as_double(limit, 0),
               d = element_as_double(delta, 0);
  MERAK_CHECK(d != 0 && d == d && s == s && l == l, "delta must be non-zero and finite bounds");
  const double count = std::max(std::ceil((l - s) / d), 0.0);
  MERAK_CHECK(count * double(dtype_size(dtype)) <= double(kMaxConstantBytes), "Range would hold ",
              count, " elements");
  Tensor out = fresh({int64_t(count)}, dtype);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (is_floating(dtype)) {
      put_double(out, i, s + double(i) * d);
    } else {
      put_int(out, i, wrap_add(element_as_int(start, 0), wrap_mul(i, element_as_int(delta, 0))));
    }
  }
  return out;
}

Tensor trilu(const onnx::NodeProto& node, const Inputs& in) {
  const Tensor& x = need(in, 0, "input");
  MERAK_CHECK(x.dim() >= 2, "Trilu needs rank >= 2");
  int64_t k = 0;
  if (in.size() > 1 && in[1].defined()) {
    const auto ks = int_values(in[1], "k");
    MERAK_CHECK(ks.size() == 1, "k must hold one value");
    k = ks[0];
  }
  const bool upper = attr_int(node, "upper", 1) != 0;
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor out = x.clone();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t c = i % cols, r = (i / cols) % rows;
    // j - i compared with k, without overflowing for extreme k.
    const int64_t diff = c - r;
    const bool keep = upper ? diff >= k : diff <= k;
    if (!keep) put_int(out, i, 0);
  }
  return out;
}

// Reduce{Sum,Prod,Max,Min,Mean} of a constant: reduced axes moved last, then row by row.
bool fold_reduce(const onnx::NodeProto& node, const Inputs& in, Tensor& out) {
  static const std::vector<std::string> ops = {"ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin",
                                               "ReduceMean"};
  const std::string& op = node.op_type();
  if (std::find(ops.begin(), ops.end(), op) == ops.end()) return false;
  const Tensor& x = need(in, 0, "data");
  std::vector<int64_t> axes = onnx_axes(axes_of(node, in, 1), x.dim(), "axes");
  if (axes.empty()) {
    if (attr_int(node, "noop_with_empty_axes", 0)) {
      out = x;
      return true;
    }
    axes.resize(size_t(x.dim()));
    std::iota(axes.begin(), axes.end(), 0);
  }
  const bool keepdims = attr_int(node, "keepdims", 1) != 0;
  std::vector<int64_t> order;
  Shape kept_shape, out_shape;
  int64_t row = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) {
      order.push_back(d);
      kept_shape.push_back(x.size(d));
    }
    if (!reduced || keepdims) out_shape.push_back(reduced ? 1 : x.size(d));
  }
  for (int64_t a : axes) {
    order.push_back(a);
    row *= x.size(a);
  }
  const Tensor moved = x.permute(order).contiguous();
  out = fresh(out_shape, x.dtype());
  const bool integral = !is_floating(x.dtype());
  for (int64_t r = 0; r < out.numel(); ++r) {
    double acc = op == "ReduceProd"  ? 1
                 : op == "ReduceMax" ? -INFINITY
                 : op == "ReduceMin" ? INFINITY
                                     : 0;
    for (int64_t j = 0; j < row; ++j) {
      const double v = element_as_double(moved, r * row + j);
      if (op == "ReduceProd")
        acc *= v;
      else if (op == "ReduceMax")
        acc = std::max(acc, v);
      else if (op == "ReduceMin")
        acc = std::min(acc, v);
      else
        acc += v;
    }
    if (op == "ReduceMean") acc = row ? acc / double(row) : NAN;
    MERAK_CHECK(!integral || std::fabs(acc) < 9e15, op, " of integers leaves double precision");
    put_double(out, r, acc);
  }
  return true;
}

// Constant's value, from whichever attribute holds it.
Tensor constant(const onnx::NodeProto& node) {
  MERAK_CHECK(node.attribute_size() == 1, "Constant needs exactly one value attribute");
  const onnx::AttributeProto& a = node.attribute(0);
  switch (a.type()) {
    case onnx::AttributeProto::TENSOR: return tensor_from_onnx(a.t(), kMaxConstantBytes);
    case onnx::AttributeProto::FLOAT: return Tensor::scalar(a.f(), DType::F32);
    case onnx::AttributeProto::INT: return Tensor::from_vector(std::vector<int64_t>{a.i()}, {});
    case onnx::AttributeProto::FLOATS: {
      std::vector<float> v(a.floats().begin(), a.floats().end());
      return Tensor::from_vector(v, {int64_t(v.size())});
    }
    case onnx::AttributeProto::INTS: {
      std::vector<int64_t> v(a.ints().begin(), a.ints().end());
      return Tensor::from_vector(v, {int64_t(v.size())});
    }
    default: MERAK_FAIL("Constant attribute '", a.name(), "' (sparse or string) is not supported");
  }
}

}  // namespace

Tensor shape_value(const onnx::NodeProto& node, const Shape& shape) {
  const int64_t rank = int64_t(shape.size());
  int64_t start = attr_int(node, "start", 0), end = attr_int(node, "end", rank);
  // Shape's start/end clamp like slice bounds (opset 15).
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> dims(shape.begin() + start, shape.begin() + end);
  return Tensor::from_vector(dims, {int64_t(dims.size())});
}

Tensor size_value(const Shape& shape) {
  return Tensor::from_vector(std::vector<int64_t>{numel(shape)}, {});
}

bool fold_node(const onnx::NodeProto& node, const Inputs& in, std::vector<Tensor>& outputs) {
  const std::string& op = node.op_type();
  Tensor out;
  if (op == "Constant") {
    out = constant(node);
  } else if (op == "Identity") {
    out = need(in, 0, "input");
  } else if (op == "Shape") {
    out = shape_value(node, need(in, 0, "data").shape());
  } else if (op == "Size") {
    out = size_value(need(in, 0, "data").shape());
  } else if (op == "Cast") {
    out = cast(need(in, 0, "input"), dtype_from_onnx(int32_t(attr_int(node, "to", 0)), "to"));
  } else if (op == "Where") {
    out = where(need(in, 0, "condition"), need(in, 1, "X"), need(in, 2, "Y"));
  } else if (op == "Reshape") {
    const Tensor& x = need(in, 0, "data");
    out = x.view(reshape_target(x.shape(), int_values(need(in, 1, "shape"), "shape"),
                                attr_int(node, "allowzero", 0) != 0));
  } else if (op == "Unsqueeze") {
    const Tensor& x = need(in, 0, "data");
    out = x.view(unsqueeze_shape(x.shape(), axes_of(node, in, 1)));
  } else if (op == "Squeeze") {
    const Tensor& x = need(in, 0, "data");
    out = x.view(squeeze_shape(x.shape(), axes_of(node, in, 1)));
  } else if (op == "Flatten") {
    const Tensor& x = need(in, 0, "input");
    out = x.view(flatten_shape(x.shape(), attr_int(node, "axis", 1)));
  } else if (op == "Transpose") {
    const Tensor& x = need(in, 0, "data");
    std::vector<int64_t> perm(size_t(x.dim()));
    std::iota(perm.rbegin(), perm.rend(), 0);
    perm = attr_ints(node, "perm", perm);
    MERAK_CHECK(int64_t(perm.size()) == x.dim(), "perm has ", perm.size(), " entries for rank ",
                x.dim());
    out = x.permute(onnx_axes(perm, x.dim(), "perm entry")).clone();
  } else if (op == "Expand") {
    const Tensor& x = need(in, 0, "input");
    out = broadcast_to(x, expand_shape(x.shape(), int_values(need(in, 1, "shape"), "shape")));
  } else if (op == "Gather") {
    out = gather(need(in, 0, "data"), need(in, 1, "indices"), attr_int(node, "axis", 0));
  } else if (op == "Concat") {
    out = concat(in, attr_int(node, "axis", 0));
  } else if (op == "Slice") {
    out = slice(node, in);
  } else if (op == "Split") {
    const Tensor& x = need(in, 0, "input");
    MERAK_CHECK(x.dim() >= 1, "Split of a scalar");
    const int64_t axis = onnx_axis(attr_int(node, "axis", 0), x.dim(), "axis");
    std::vector<int64_t> given;
    if (in.size() > 1 && in[1].defined())
      given = int_values(in[1], "split");
    else
      given = attr_ints(node, "split", {});
    const auto sizes =
        split_sizes(x.shape(), axis, given.empty() ? nullptr : &given, node.output_size());
    int64_t at = 0;
    for (int64_t n : sizes) {
      outputs.push_back(x.narrow(axis, at, n).clone());
      at += n;
    }
    return true;
  } else if (op == "ConstantOfShape") {
    out = constant_of_shape(node, in);
  } else if (op == "Range") {
    out = range(in);
  } else if (op == "Trilu") {
    out = trilu(node, in);
  } else if (fold_binary(op, in, out) || fold_unary(op, in, out) || fold_reduce(node, in, out)) {
    // computed above
  } else {
    return false;
  }
  outputs.push_back(out.contiguous());
  return true;
}

}  // namespace merak::graph::onnx_detail
