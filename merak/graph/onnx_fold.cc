// Constant folding runs the registry's ops on the constant CPU tensors: the op registry_op()
// names for the ONNX op (the one conversion emits), or the shape op the conversion's shape
// rules lead to. A folded constant is then what the graph would have computed, by the same
// kernels. ONNX's own conventions (negative indices, Slice's clamping, axes as inputs, opset
// forms of attributes) are put into the registry op's form here.
//
// What stays ONNX-side: the structural values no op computes (Constant, Shape, Size,
// ConstantOfShape, and the positions that Range's length and Trilu's mask depend on; the values
// then go through arange and where). Every arithmetic, comparison, logical op and reduction is
// a registry op's kernel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "merak/graph/onnx_fold_internal.h"
#include "merak/graph/onnx_ops_internal.h"
#include "merak/graph/onnx_proto_internal.h"
#include "merak/graph/onnx_shapes_internal.h"
#include "merak/ops/dispatch.h"

namespace merak::graph::onnx_detail {
namespace {

using Inputs = std::vector<Tensor>;
using ops::Attrs;

const Tensor& need(const Inputs& in, size_t i, const char* what) {
  MERAK_CHECK(i < in.size() && in[i].defined(), "input ", i, " (", what, ") is missing");
  return in[i];
}

void check_size(const Shape& shape, DType dtype) {
  checked_numel(shape, kMaxConstantBytes / int64_t(dtype_size(dtype)), "folded constant");
}

// --- running registry ops ---

// Registry op `name` on constant CPU tensors. The outputs' size is checked against the constant
// limit before the kernel allocates them: a hostile file must not exhaust memory.
std::vector<Tensor> run_all(const std::string& name, const Inputs& in, const Attrs& attrs = {}) {
  const ops::OpDef& op = ops::Registry::get().at(name);
  std::vector<ops::TensorMeta> metas;
  for (const Tensor& t : in) metas.push_back(ops::TensorMeta::of(t));
  for (const ops::TensorMeta& m : ops::infer(op, metas, ops::complete_attrs(op, attrs)))
    check_size(m.shape, m.dtype);
  return ops::call(op, in, attrs);
}

Tensor run(const std::string& name, const Inputs& in, const Attrs& attrs = {}) {
  return run_all(name, in, attrs)[0];
}

Tensor cast(const Tensor& x, DType to) {
  return x.dtype() == to ? x : run("cast", {x}, Attrs().set("dtype", dtype_name(to)));
}

bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }

// The CPU kernels compute in f32 and f64: bf16 and f16 constants compute in f32 (exactly
// widened) and round back once, as the old double evaluation rounded once.
Tensor compute(const std::string& op, const Inputs& in, const Attrs& attrs = {}) {
  Inputs wide;
  for (const Tensor& t : in)
    wide.push_back(t.defined() && is_half(t.dtype()) ? cast(t, DType::F32) : t);
  const Tensor y = run(op, wide, attrs);
  const DType src = in.back().dtype();  // the data input (Where's cond comes first)
  return is_half(src) && y.dtype() == DType::F32 ? cast(y, src) : y;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  return run("reshape", {x}, Attrs().set("shape", shape));
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end) {
  return run("slice", {x}, Attrs().set("dim", axis).set("start", start).set("end", end));
}

// x's entries at `indices` (non-negative, in range) along `axis`, in order: registry slices of
// the runs of consecutive indices, joined by concat. No registry op gathers along any axis of
// any dtype (embedding reads rows of a floating table).
Tensor take(const Tensor& x, int64_t axis, const std::vector<int64_t>& indices) {
  if (indices.empty()) return slice(x, axis, 0, 0);
  Inputs pieces;
  for (size_t j = 0; j < indices.size();) {
    size_t k = j + 1;
    while (k < indices.size() && indices[k] == indices[k - 1] + 1) ++k;
    pieces.push_back(slice(x, axis, indices[j], indices[k - 1] + 1));
    j = k;
  }
  return run("concat", pieces, Attrs().set("dim", axis));
}

// --- ONNX ops as registry ops ---

// Axes from the input at `index` when present (opset 13+), else from the attribute.
std::vector<int64_t> axes_of(const onnx::NodeProto& node, const Inputs& in, size_t index) {
  if (index < in.size() && in[index].defined()) return int_values(in[index], "axes");
  return attr_ints(node, "axes", {});
}

// Add, Sub, Mul, Div, Sqrt, Exp, ..., Abs, Floor, Equal, Less, And, Where: their registry op
// as it is. Integers take the kernels' i32/i64 paths (Div truncates toward zero and fails on a
// zero divisor; Abs and Sign are exact); comparisons give bool and logical ops need it.
Tensor elementwise(const std::string& op, const Inputs& in) {
  const Tensor& x = need(in, 0, "input");
  if (op == "Sqrt" || op == "Exp" || op == "Log" || op == "Erf" || op == "Tanh" ||
      op == "Floor" || op == "Ceil")
    MERAK_CHECK(is_floating(x.dtype()), op, " needs a floating input");
  return compute(registry_op(op), in);
}

// Max and Min of any number of inputs: the registry's maximum / minimum, left to right (NaN
// wins; integers exact).
Tensor extremum(const std::string& op, const Inputs& in) {
  Tensor out = need(in, 0, "data_0");
  for (size_t i = 1; i < in.size(); ++i) out = elementwise(op, {out, need(in, i, "data")});
  return out;
}

// Pow: the registry's pow for a one-element exponent, else pow_tensor. Integer bases compute in
// f64 and convert back (truncating, saturating) as ONNX's reference does; the exponent takes
// the base's computing dtype (ONNX lets the two differ).
Tensor pow(const Inputs& in) {
  const Tensor &x = need(in, 0, "X"), &y = need(in, 1, "Y");
  const DType t = !is_floating(x.dtype()) ? DType::F64 : is_half(x.dtype()) ? DType::F32
                                                                             : x.dtype();
  if (y.numel() != 1) return cast(run("pow_tensor", {cast(x, t), cast(y, t)}), x.dtype());
  const Attrs exponent = Attrs().set("exponent", element_as_double(y, 0));
  Tensor out = cast(run("pow", {cast(x, t)}, exponent), x.dtype());
  // A one-element exponent of higher rank adds leading 1s to the shape.
  const Shape shape = broadcast_shapes(x.shape(), y.shape());
  if (shape != out.shape()) out = reshape(out, shape);
  return out;
}

// not x is x == false, as conversion maps it.
Tensor logical_not(const Tensor& x) {
  MERAK_CHECK(x.dtype() == DType::Bool, "Not needs a bool input");
  return run(registry_op("Equal"), {x, Tensor::zeros({}, DType::Bool)});
}

// 1 / x, as conversion maps it.
Tensor reciprocal(const Tensor& x) {
  MERAK_CHECK(is_floating(x.dtype()), "Reciprocal needs a floating input");
  return compute(registry_op("Div"), {Tensor::scalar(1.0, x.dtype()), x});
}

Tensor gather(const Tensor& data, const Tensor& indices, int64_t axis_attr) {
  MERAK_CHECK(data.dim() >= 1, "Gather needs data of rank >= 1");
  const int64_t axis = onnx_axis(axis_attr, data.dim(), "axis");
  const int64_t n = data.size(axis);
  std::vector<int64_t> idx = int_values(indices, "indices");
  for (int64_t& i : idx) {  // ONNX counts negative indices from the end
    const int64_t k = i < 0 ? i + n : i;
    MERAK_CHECK(k >= 0 && k < n, "index ", i, " is out of range for a dim of ", n);
    i = k;
  }
  Shape shape(data.shape().begin(), data.shape().begin() + axis);
  shape.insert(shape.end(), indices.shape().begin(), indices.shape().end());
  shape.insert(shape.end(), data.shape().begin() + axis + 1, data.shape().end());
  return reshape(take(data, axis, idx), shape);
}

Tensor concat(const Inputs& in, int64_t axis_attr) {
  const Tensor& first = need(in, 0, "inputs");
  MERAK_CHECK(first.dim() >= 1, "Concat of scalars");
  return run("concat", in, Attrs().set("dim", onnx_axis(axis_attr, first.dim(), "axis")));
}

// One registry slice per cut axis after ONNX's clamping; a step > 1 takes the entries one
// by one.
Tensor slice(const onnx::NodeProto& node, const Inputs& in) {
  Tensor x = need(in, 0, "data");
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
  for (const SliceAxis& s : slice_axes(x.shape(), starts, ends, axes, steps)) {
    MERAK_CHECK(s.step > 0, "negative slice steps are not supported");
    if (s.step == 1) {
      x = slice(x, s.axis, s.start, s.start + s.count);
      continue;
    }
    std::vector<int64_t> picked;
    for (int64_t i = 0; i < s.count; ++i) picked.push_back(s.start + i * s.step);
    x = take(x, s.axis, picked);
  }
  return x;
}

// Reduce{Sum,Mean,Max,Min,Prod}: the registry's sum, mean, max, min, prod over the axes.
// Integers reduce in f64 and convert back, failing where f64 no longer holds every integer.
bool reduce(const onnx::NodeProto& node, const Inputs& in, Tensor& out) {
  const std::string& op = node.op_type();
  if (op.rfind("Reduce", 0) != 0 || !registry_op(op)) return false;
  const Tensor& x = need(in, 0, "data");
  const std::vector<int64_t> axes = onnx_axes(axes_of(node, in, 1), x.dim(), "axes");
  if (axes.empty() && attr_int(node, "noop_with_empty_axes", 0)) {
    out = x;
    return true;
  }
  // Empty dims reduce every dim, as ONNX's empty axes do.
  const Attrs attrs =
      Attrs().set("dims", axes).set("keepdim", attr_int(node, "keepdims", 1) != 0);
  if (is_floating(x.dtype())) {
    out = compute(registry_op(op), {x}, attrs);
    return true;
  }
  const Tensor y = run(registry_op(op), {cast(x, DType::F64)}, attrs);
  for (int64_t i = 0; i < y.numel(); ++i)
    MERAK_CHECK(std::fabs(y.data<double>()[i]) < 9e15, op, " of integers leaves double precision");
  out = cast(y, x.dtype());
  return true;
}

// Range: ceil((limit - start) / delta) entries start + i * delta. The length is ONNX's rule;
// arange numbers the entries, in i64 for integers (wrapping) and f64 for floating dtypes,
// rounded once to the dtype.
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
  // arange reads only its input's shape: a broadcast scalar holds no memory.
  const Tensor i = run("arange", {Tensor::scalar(0.0).expand({int64_t(count)})});
  if (is_floating(dtype)) {
    const Tensor y = run("add", {run("mul", {cast(i, DType::F64), Tensor::scalar(d, DType::F64)}),
                                 Tensor::scalar(s, DType::F64)});
    return cast(y, dtype);
  }
  auto int_scalar = [](int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}, {}); };
  const Tensor y = run("add", {run("mul", {i, int_scalar(element_as_int(delta, 0))}),
                               int_scalar(element_as_int(start, 0))});
  return cast(y, dtype);
}

// Trilu: which entries it keeps depends on positions only (column - row against k), a mask
// built here; the registry's where selects x's values or zeros.
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
  Tensor keep = Tensor::empty({rows, cols}, DType::Bool);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      keep.data<bool>()[r * cols + c] = upper ? c - r >= k : c - r <= k;
  return compute(registry_op("Where"), {keep, x, Tensor::zeros({}, x.dtype())});
}

// --- values no op computes ---

Tensor fresh(const Shape& shape, DType dtype) {
  check_size(shape, dtype);
  return Tensor::empty(shape, dtype);
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
  } else if (op == "ConstantOfShape") {
    out = constant_of_shape(node, in);
  } else if (op == "Cast") {
    out = cast(need(in, 0, "input"), dtype_from_onnx(int32_t(attr_int(node, "to", 0)), "to"));
  } else if (op == "Reshape") {
    const Tensor& x = need(in, 0, "data");
    out = reshape(x, reshape_target(x.shape(), int_values(need(in, 1, "shape"), "shape"),
                                    attr_int(node, "allowzero", 0) != 0));
  } else if (op == "Unsqueeze") {
    const Tensor& x = need(in, 0, "data");
    out = reshape(x, unsqueeze_shape(x.shape(), axes_of(node, in, 1)));
  } else if (op == "Squeeze") {
    const Tensor& x = need(in, 0, "data");
    out = reshape(x, squeeze_shape(x.shape(), axes_of(node, in, 1)));
  } else if (op == "Flatten") {
    const Tensor& x = need(in, 0, "input");
    out = reshape(x, flatten_shape(x.shape(), attr_int(node, "axis", 1)));
  } else if (op == "Transpose") {
    const Tensor& x = need(in, 0, "data");
    std::vector<int64_t> perm(size_t(x.dim()));
    std::iota(perm.rbegin(), perm.rend(), 0);
    out = run("permute", {x}, Attrs().set("order", attr_ints(node, "perm", perm)));
  } else if (op == "Expand") {
    const Tensor& x = need(in, 0, "input");
    const Shape shape = expand_shape(x.shape(), int_values(need(in, 1, "shape"), "shape"));
    out = run("expand", {x}, Attrs().set("shape", shape));
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
    for (const Tensor& piece : run_all("split", {x}, Attrs().set("sizes", sizes).set("dim", axis)))
      outputs.push_back(piece.contiguous());
    return true;
  } else if (op == "Range") {
    out = range(in);
  } else if (op == "Trilu") {
    out = trilu(node, in);
  } else if (op == "Not") {
    out = logical_not(need(in, 0, "X"));
  } else if (op == "Reciprocal") {
    out = reciprocal(need(in, 0, "X"));
  } else if (op == "Pow") {
    out = pow(in);
  } else if (op == "Max" || op == "Min") {
    out = extremum(op, in);
  } else if (registry_op(op) && op.rfind("Reduce", 0) != 0) {
    out = elementwise(op, in);
  } else if (reduce(node, in, out)) {
    // computed above
  } else {
    return false;
  }
  outputs.push_back(out.contiguous());
  return true;
}

}  // namespace merak::graph::onnx_detail
