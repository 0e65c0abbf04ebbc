// One function per ONNX op (or family) turning a node into registry ops. Shapes are concrete
// here (dynamic axes were bound before shape inference), so shape-like inputs that folding made
// constant become plain attributes (reshape's shape, slice's bounds, ...).
#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "merak/core/philox.h"
#include "merak/graph/onnx_ops_internal.h"
#include "merak/graph/onnx_proto_internal.h"
#include "merak/graph/onnx_shapes_internal.h"

namespace merak::graph::onnx_detail {
namespace {

using onnx::NodeProto;
using ops::Attrs;
using ops::TensorMeta;

const std::string& input(const NodeProto& n, int i) {
  static const std::string absent;
  return i < n.input_size() ? n.input(i) : absent;
}

// Output i by name; the checker has verified the schema's output count, but stay safe.
const std::string& output(const NodeProto& n, int i) {
  MERAK_CHECK(i < n.output_size() && !n.output(i).empty(), "output ", i, " is missing");
  return n.output(i);
}

const TensorMeta& meta(Builder& b, const NodeProto& n, int i) {
  MERAK_CHECK(!input(n, i).empty(), "input ", i, " is missing");
  return b.at(input(n, i)).meta;
}

// An input that must be known at import time (a shape, axes, bounds), as integers.
std::vector<int64_t> const_ints(Builder& b, const NodeProto& n, int i, const char* what) {
  const std::string& name = input(n, i);
  MERAK_CHECK(!name.empty(), what, " input is missing");
  if (!b.is_constant(name))
    throw Unsupported(detail::concat(what, " '", name, "' is computed at run time; Merak needs ",
                                     "it to fold to a constant"));
  return int_values(b.at(name).constant, what);
}

// Axes from the input at `index` when present (opset 13+), else from the attribute.
std::vector<int64_t> axes_of(Builder& b, const NodeProto& n, int index) {
  if (!input(n, index).empty()) return const_ints(b, n, index, "axes");
  return attr_ints(n, "axes", {});
}

std::optional<double> scalar_constant(Builder& b, const std::string& name) {
  if (name.empty() || !b.is_constant(name)) return std::nullopt;
  const Tensor& t = b.at(name).constant;
  if (t.numel() != 1) return std::nullopt;
  return element_as_double(t, 0);
}

void require_unused(Builder& b, const NodeProto& n, int from, const char* what) {
  for (int i = from; i < n.output_size(); ++i)
    if (!n.output(i).empty() && b.is_used(n.output(i)))
      throw Unsupported(detail::concat("its ", what, " output '", n.output(i), "' is used"));
}

// A shape change of `x` into `out`; nothing to emit when it keeps the shape.
void reshape_to(Builder& b, const std::string& x, const Shape& shape, const std::string& out) {
  if (b.at(x).meta.shape == shape) {
    b.set_alias(out, x);
    return;
  }
  b.emit("reshape", {b.use(x)}, Attrs().set("shape", shape), {out});
}

// --- pass-through and casts ---

void identity(Builder& b, const NodeProto& n) {
  // PyTorch's export merges parameters with equal values (all the zero biases, the unit norm
  // weights) into one initializer and re-creates the others by Identity. Giving each its own
  // copy restores the model's real parameters, which then train independently.
  if (b.at(input(n, 0)).parameter && b.is_used(output(n, 0))) {
    b.copy_parameter(output(n, 0), input(n, 0));
    return;
  }
  b.set_alias(output(n, 0), input(n, 0));
}

// Inference-mode dropout is the identity. In training mode (opset 12+: the third input) it is
// Merak's dropout, keyed by the seed and its output's name (unique in the file), so every layout
// draws the same masks; the rate must be a constant.
void dropout(Builder& b, const NodeProto& n) {
  require_unused(b, n, 1, "mask");
  bool training = false;
  if (!input(n, 2).empty()) {
    const auto mode = scalar_constant(b, input(n, 2));
    if (!mode) throw Unsupported("training_mode '" + input(n, 2) + "' is computed at run time");
    training = *mode != 0;
  }
  double ratio = 0.5;  // ONNX's default
  if (training && !input(n, 1).empty()) {
    const auto r = scalar_constant(b, input(n, 1));
    if (!r) throw Unsupported("ratio '" + input(n, 1) + "' is computed at run time");
    ratio = *r;
  }
  if (!training || ratio == 0) {
    b.set_alias(output(n, 0), input(n, 0));
    return;
  }
  MERAK_CHECK(ratio > 0 && ratio < 1, "ratio ", ratio, " is outside [0, 1)");
  const uint64_t key = philox_key(b.seed(), "dropout:" + output(n, 0));
  b.emit("dropout", {b.use(input(n, 0))},
         Attrs().set("p", ratio).set("key", int64_t(key)), {output(n, 0)});
}

void cast(Builder& b, const NodeProto& n) {
  const DType to = dtype_from_onnx(int32_t(attr_int(n, "to", 0)), "attribute 'to'");
  if (to == meta(b, n, 0).dtype) {
    b.set_alias(output(n, 0), input(n, 0));
    return;
  }
  b.emit("cast", {b.use(input(n, 0))}, Attrs().set("dtype", dtype_name(to)), {output(n, 0)});
}

// --- shape ops ---

void reshape(Builder& b, const NodeProto& n) {
  const Shape target = reshape_target(meta(b, n, 0).shape, const_ints(b, n, 1, "shape"),
                                      attr_int(n, "allowzero", 0) != 0);
  reshape_to(b, input(n, 0), target, output(n, 0));
}

void unsqueeze(Builder& b, const NodeProto& n) {
  reshape_to(b, input(n, 0), unsqueeze_shape(meta(b, n, 0).shape, axes_of(b, n, 1)), output(n, 0));
}

void squeeze(Builder& b, const NodeProto& n) {
  reshape_to(b, input(n, 0), squeeze_shape(meta(b, n, 0).shape, axes_of(b, n, 1)), output(n, 0));
}

void flatten(Builder& b, const NodeProto& n) {
  reshape_to(b, input(n, 0), flatten_shape(meta(b, n, 0).shape, attr_int(n, "axis", 1)),
             output(n, 0));
}

void transpose(Builder& b, const NodeProto& n) {
  const int64_t rank = int64_t(meta(b, n, 0).shape.size());
  std::vector<int64_t> reversed;
  for (int64_t i = rank - 1; i >= 0; --i) reversed.push_back(i);
  b.emit("permute", {b.use(input(n, 0))}, Attrs().set("order", attr_ints(n, "perm", reversed)),
         {output(n, 0)});
}

void expand(Builder& b, const NodeProto& n) {
  const Shape& in = meta(b, n, 0).shape;
  const Shape target = expand_shape(in, const_ints(b, n, 1, "shape"));
  if (target == in) {
    b.set_alias(output(n, 0), input(n, 0));
    return;
  }
  b.emit("expand", {b.use(input(n, 0))}, Attrs().set("shape", target), {output(n, 0)});
}

void concat(Builder& b, const NodeProto& n) {
  const int64_t rank = int64_t(meta(b, n, 0).shape.size());
  std::vector<std::string> xs;
  for (const std::string& x : n.input()) xs.push_back(b.use(x));
  b.emit("concat", xs, Attrs().set("dim", onnx_axis(attr_int(n, "axis", 0), rank, "axis")),
         {output(n, 0)});
}

void split(Builder& b, const NodeProto& n) {
  const Shape& in = meta(b, n, 0).shape;
  MERAK_CHECK(!in.empty(), "cannot split a scalar");
  const int64_t axis = onnx_axis(attr_int(n, "axis", 0), int64_t(in.size()), "axis");
  std::vector<int64_t> given =
      input(n, 1).empty() ? attr_ints(n, "split", {}) : const_ints(b, n, 1, "split");
  const auto sizes = split_sizes(in, axis, given.empty() ? nullptr : &given, n.output_size());
  std::vector<std::string> outs;
  for (const std::string& o : n.output()) outs.push_back(o.empty() ? b.temp() : o);
  b.emit("split", {b.use(input(n, 0))}, Attrs().set("sizes", sizes).set("dim", axis), outs);
}

void slice(Builder& b, const NodeProto& n) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.input_size() > 1) {
    starts = const_ints(b, n, 1, "starts");
    ends = const_ints(b, n, 2, "ends");
    if (!input(n, 3).empty()) axes = const_ints(b, n, 3, "axes");
    if (!input(n, 4).empty()) steps = const_ints(b, n, 4, "steps");
  } else {
    starts = attr_ints(n, "starts", {});
    ends = attr_ints(n, "ends", {});
    axes = attr_ints(n, "axes", {});
  }
  const Shape& in = meta(b, n, 0).shape;
  std::vector<SliceAxis> cuts;
  for (const SliceAxis& s : slice_axes(in, starts, ends, axes, steps)) {
    if (s.start == 0 && s.step == 1 && s.count == in[size_t(s.axis)]) continue;  // whole axis
    if (s.step != 1) throw Unsupported(detail::concat("slice step ", s.step, " (only 1 maps)"));
    cuts.push_back(s);
  }
  if (cuts.empty()) {
    b.set_alias(output(n, 0), input(n, 0));
    return;
  }
  std::string x = b.use(input(n, 0));
  for (size_t i = 0; i < cuts.size(); ++i) {
    const std::string out = i + 1 == cuts.size() ? output(n, 0) : b.temp();
    const SliceAxis& s = cuts[i];
    b.emit("slice", {x},
           Attrs().set("dim", s.axis).set("start", s.start).set("end", s.start + s.count), {out});
    x = out;
  }
}

// Gather: an embedding lookup when the data is a 2-D table; otherwise constant indices that
// pick one position or a contiguous run become a slice.
void gather(Builder& b, const NodeProto& n) {
  const Value& data = b.at(input(n, 0));
  const Value& ids = b.at(input(n, 1));
  const int64_t rank = int64_t(data.meta.shape.size());
  MERAK_CHECK(rank >= 1, "Gather needs data of rank >= 1");
  const int64_t axis = onnx_axis(attr_int(n, "axis", 0), rank, "axis");
  const bool table = (data.parameter || data.constant.defined()) && rank == 2 && axis == 0 &&
                     is_floating(data.meta.dtype);
  if (table) {
    // ONNX counts negative indices from the end; embedding takes 0 .. rows-1 only. Constant
    // indices are wrapped here; run-time ones stay the graph input they are, which the
    // partitioner's vocabulary-parallel lookups require (the embedding refuses a negative one).
    std::vector<int64_t> idx;
    if (ids.constant.defined()) idx = int_values(ids.constant, "indices");
    const int64_t rows = data.meta.shape[0];
    for (int64_t i : idx)
      MERAK_CHECK(i >= -rows && i < rows, "Gather index ", i, " is out of range for a table of ",
                  rows, " rows");
    if (std::none_of(idx.begin(), idx.end(), [](int64_t i) { return i < 0; })) {
      b.emit("embedding", {b.use(input(n, 0)), b.use(input(n, 1))}, {}, {output(n, 0)});
      return;
    }
    for (int64_t& i : idx) i += i < 0 ? rows : 0;
    const std::string wrapped = b.add_constant(Tensor::from_vector(idx, ids.constant.shape()));
    b.emit("embedding", {b.use(input(n, 0)), wrapped}, {}, {output(n, 0)});
    return;
  }
  if (!ids.constant.defined())
    throw Unsupported("Gather with run-time indices on data that is not a 2-D parameter table");
  const std::vector<int64_t> idx = int_values(ids.constant, "indices");
  const int64_t size = data.meta.shape[size_t(axis)];
  auto norm = [size](int64_t i) { return i < 0 ? i + size : i; };
  bool run = !idx.empty();
  for (size_t i = 1; run && i < idx.size(); ++i) run = norm(idx[i]) == norm(idx[0]) + int64_t(i);
  if (!run) throw Unsupported("Gather with constant indices that are not one contiguous run");
  const int64_t start = norm(idx[0]);
  const int64_t end = start + int64_t(idx.size());
  MERAK_CHECK(start >= 0 && end <= size, "indices ", shape_str(idx), " are out of range for ",
              size);
  if (ids.meta.shape.size() == 1) {
    b.emit("slice", {b.use(input(n, 0))},
           Attrs().set("dim", axis).set("start", start).set("end", end), {output(n, 0)});
    return;
  }
  MERAK_CHECK(ids.meta.shape.empty(), "constant indices of rank > 1 are not supported");
  const std::string picked = b.temp();
  b.emit("slice", {b.use(input(n, 0))},
         Attrs().set("dim", axis).set("start", start).set("end", end), {picked});
  Shape dropped = data.meta.shape;
  dropped.erase(dropped.begin() + axis);
  reshape_to(b, picked, dropped, output(n, 0));
}

// --- arithmetic ---

// Add/Sub/Mul/Div. A scalar constant operand that leaves the other's shape as it is becomes a
// scalar op (no constant tensor); Div keeps the division so its rounding matches the source.
void arithmetic(Builder& b, const NodeProto& n, const std::string& op) {
  const std::string &a = input(n, 0), &c = input(n, 1);
  const TensorMeta &ma = meta(b, n, 0), &mc = meta(b, n, 1);
  if (!is_floating(ma.dtype))
    throw Unsupported(detail::concat("arithmetic on run-time ", dtype_name(ma.dtype),
                                     " values (only floating-point arithmetic is mapped)"));
  const Shape shape = broadcast_shapes(ma.shape, mc.shape);
  const auto sa = scalar_constant(b, a), sc = scalar_constant(b, c);
  const std::string& out = output(n, 0);
  if (sc && shape == ma.shape && op != "div") {
    if (op == "mul")
      b.emit("mul_scalar", {b.use(a)}, Attrs().set("value", *sc), {out});
    else
      b.emit("add_scalar", {b.use(a)}, Attrs().set("value", op == "add" ? *sc : -*sc), {out});
    return;
  }
  if (sa && shape == mc.shape && (op == "add" || op == "mul")) {
    b.emit(op == "add" ? "add_scalar" : "mul_scalar", {b.use(c)}, Attrs().set("value", *sa), {out});
    return;
  }
  b.emit(op, {b.use(a), b.use(c)}, {}, {out});
}

// Pow: a constant one-element exponent that leaves the base's shape as it is becomes pow's
// attribute; any other exponent (of the base's dtype) is pow_tensor's second input.
void pow(Builder& b, const NodeProto& n) {
  const auto e = scalar_constant(b, input(n, 1));
  const Shape& base = meta(b, n, 0).shape;
  if (e && broadcast_shapes(base, meta(b, n, 1).shape) == base) {
    b.emit("pow", {b.use(input(n, 0))}, Attrs().set("exponent", *e), {output(n, 0)});
    return;
  }
  b.emit("pow_tensor", {b.use(input(n, 0)), b.use(input(n, 1))}, {}, {output(n, 0)});
}

void reciprocal(Builder& b, const NodeProto& n) {
  const std::string one = b.add_constant(Tensor::scalar(1.0, meta(b, n, 0).dtype));
  b.emit("div", {one, b.use(input(n, 0))}, {}, {output(n, 0)});
}

// --- matrix products ---

// ONNX MatMul follows numpy: a 1-D operand gets a unit dim that the result drops again.
void matmul(Builder& b, const NodeProto& n) {
  Shape sa = meta(b, n, 0).shape, sb = meta(b, n, 1).shape;
  MERAK_CHECK(!sa.empty() && !sb.empty(), "MatMul of a scalar");
  std::string x = b.use(input(n, 0)), y = b.use(input(n, 1));
  const bool vec_a = sa.size() == 1, vec_b = sb.size() == 1;
  if (vec_a) {
    const std::string t = b.temp();
    b.emit("reshape", {x}, Attrs().set("shape", Shape{1, sa[0]}), {t});
    x = t;
  }
  if (vec_b) {
    const std::string t = b.temp();
    b.emit("reshape", {y}, Attrs().set("shape", Shape{sb[0], 1}), {t});
    y = t;
  }
  if (!vec_a && !vec_b) {
    b.emit("matmul", {x, y}, {}, {output(n, 0)});
    return;
  }
  const std::string product = b.temp();
  Shape shape = b.emit("matmul", {x, y}, {}, {product})[0].shape;
  if (vec_b) shape.pop_back();
  if (vec_a) shape.erase(shape.end() - 1 - (vec_b ? 0 : 1));
  b.emit("reshape", {product}, Attrs().set("shape", shape), {output(n, 0)});
}

// Gemm: alpha * op(A) op(B) + beta * C. The fusion pass turns matmul(trans_b) + bias into linear.
void gemm(Builder& b, const NodeProto& n) {
  const double alpha = attr_float(n, "alpha", 1.0f), beta = attr_float(n, "beta", 1.0f);
  const bool has_c = !input(n, 2).empty();
  std::string y = alpha == 1 && !has_c ? output(n, 0) : b.temp();
  b.emit("matmul", {b.use(input(n, 0)), b.use(input(n, 1))},
         Attrs()
             .set("trans_a", attr_int(n, "transA", 0) != 0)
             .set("trans_b", attr_int(n, "transB", 0) != 0),
         {y});
  if (alpha != 1) {
    const std::string scaled = has_c ? b.temp() : output(n, 0);
    b.emit("mul_scalar", {y}, Attrs().set("value", alpha), {scaled});
    y = scaled;
  }
  if (!has_c) return;
  std::string c = b.use(input(n, 2));
  if (beta != 1) {
    const std::string scaled = b.temp();
    b.emit("mul_scalar", {c}, Attrs().set("value", beta), {scaled});
    c = scaled;
  }
  b.emit("add", {y, c}, {}, {output(n, 0)});
}

// --- normalisation, activations, reductions ---

void softmax(Builder& b, const NodeProto& n, const std::string& op, int64_t opset) {
  const int64_t rank = int64_t(meta(b, n, 0).shape.size());
  const int64_t axis = onnx_axis(attr_int(n, "axis", opset >= 13 ? -1 : 1), rank, "axis");
  // Before opset 13 the op flattens dims from `axis` on: equal to ours only on the last one.
  if (opset < 13 && axis != rank - 1)
    throw Unsupported("opset < 13 softmax over a flattened range of axes");
  b.emit(op, {b.use(input(n, 0))}, Attrs().set("dim", axis), {output(n, 0)});
}

void layer_norm(Builder& b, const NodeProto& n) {
  const int64_t rank = int64_t(meta(b, n, 0).shape.size());
  const int64_t axis = onnx_axis(attr_int(n, "axis", -1), rank, "axis");
  if (axis != rank - 1) throw Unsupported("normalisation over more than the last axis");
  require_unused(b, n, 1, "mean / inverse std");
  const std::string w = input(n, 1).empty() ? "" : b.use(input(n, 1));
  const std::string bias = input(n, 2).empty() ? "" : b.use(input(n, 2));
  // The registry's layer_norm also returns mean and rstd (for its backward).
  b.emit("layer_norm", {b.use(input(n, 0)), w, bias},
         Attrs().set("eps", double(attr_float(n, "epsilon", 1e-5f))),
         {output(n, 0), b.temp(), b.temp()});
}

void reduce(Builder& b, const NodeProto& n, int64_t opset) {
  const int64_t rank = int64_t(meta(b, n, 0).shape.size());
  // ReduceSum takes its axes as an input from opset 13, the others from opset 18.
  const bool axes_input = n.op_type() == "ReduceSum" ? opset >= 13 : opset >= 18;
  const std::vector<int64_t> axes =
      axes_input ? (input(n, 1).empty() ? std::vector<int64_t>{} : const_ints(b, n, 1, "axes"))
                 : attr_ints(n, "axes", {});
  if (axes.empty() && attr_int(n, "noop_with_empty_axes", 0)) {
    b.set_alias(output(n, 0), input(n, 0));
    return;
  }
  b.emit(registry_op(n.op_type()), {b.use(input(n, 0))},
         Attrs()
             .set("dims", onnx_axes(axes, rank, "axis"))
             .set("keepdim", attr_int(n, "keepdims", 1) != 0),
         {output(n, 0)});
}

// --- comparisons and selection ---

// not(x) for a bool x: folded when constant, else x == false.
std::string logical_not(Builder& b, const std::string& x) {
  const Value& v = b.at(x);
  if (v.constant.defined()) {
    Tensor out = Tensor::empty(v.constant.shape(), DType::Bool);
    for (int64_t i = 0; i < out.numel(); ++i) out.data<bool>()[i] = !element_as_int(v.constant, i);
    return b.add_constant(out);
  }
  const std::string out = b.temp();
  b.emit("eq", {b.use(x), b.add_constant(Tensor::zeros({}, DType::Bool))}, {}, {out});
  return out;
}

void not_op(Builder& b, const NodeProto& n) {
  b.emit("eq", {b.use(input(n, 0)), b.add_constant(Tensor::zeros({}, DType::Bool))}, {},
         {output(n, 0)});
}

// Where(cond, scalar, x) is masked_fill(x, cond, scalar), the form attention masks take.
void where(Builder& b, const NodeProto& n) {
  const std::string &cond = input(n, 0), &x = input(n, 1), &y = input(n, 2);
  const Shape& cs = meta(b, n, 0).shape;
  const auto sx = scalar_constant(b, x), sy = scalar_constant(b, y);
  // masked_fill keeps v's shape: neither cond nor the one-element constant c may raise its rank.
  auto fills = [&](const std::string& v, const std::string& c) {
    const Shape& s = b.at(v).meta.shape;
    return !b.is_constant(v) && broadcast_shapes(cs, s) == s &&
           broadcast_shapes(b.at(c).meta.shape, s) == s;
  };
  if (sx && fills(y, x)) {
    b.emit("masked_fill", {b.use(y), b.use(cond)}, Attrs().set("value", *sx), {output(n, 0)});
  } else if (sy && fills(x, y)) {
    b.emit("masked_fill", {b.use(x), logical_not(b, cond)}, Attrs().set("value", *sy),
           {output(n, 0)});
  } else {
    b.emit(registry_op("Where"), {b.use(cond), b.use(x), b.use(y)}, {}, {output(n, 0)});
  }
}

using Converter = std::function<void(Builder&, const NodeProto&, int64_t opset)>;

// An ONNX op that is its registry_op() on the one input.
void unary(Builder& b, const NodeProto& n) {
  b.emit(registry_op(n.op_type()), {b.use(input(n, 0))}, {}, {output(n, 0)});
}

// An ONNX op that is its registry_op() on the two inputs (comparisons, logical ops).
void binary(Builder& b, const NodeProto& n) {
  b.emit(registry_op(n.op_type()), {b.use(input(n, 0)), b.use(input(n, 1))}, {}, {output(n, 0)});
}

// Max and Min of any number of inputs: the binary registry op, left to right.
void extremum(Builder& b, const NodeProto& n) {
  MERAK_CHECK(n.input_size() >= 1 && !input(n, 0).empty(), "input 0 is missing");
  if (n.input_size() == 1) {
    b.set_alias(output(n, 0), input(n, 0));
    return;
  }
  std::string acc = b.use(input(n, 0));
  for (int i = 1; i < n.input_size(); ++i) {
    const std::string out = i + 1 == n.input_size() ? output(n, 0) : b.temp();
    b.emit(registry_op(n.op_type()), {acc, b.use(input(n, i))}, {}, {out});
    acc = out;
  }
}

void arithmetic_op(Builder& b, const NodeProto& n) { arithmetic(b, n, registry_op(n.op_type())); }

Converter plain(void (*f)(Builder&, const NodeProto&)) {
  return [f](Builder& b, const NodeProto& n, int64_t) { f(b, n); };
}

const std::map<std::string, Converter>& converters() {
  static const std::map<std::string, Converter> table = {
      {"Identity", plain(identity)},
      {"Dropout", plain(dropout)},
      {"Cast", plain(cast)},
      {"Reshape", plain(reshape)},
      {"Unsqueeze", plain(unsqueeze)},
      {"Squeeze", plain(squeeze)},
      {"Flatten", plain(flatten)},
      {"Transpose", plain(transpose)},
      {"Expand", plain(expand)},
      {"Concat", plain(concat)},
      {"Split", plain(split)},
      {"Slice", plain(slice)},
      {"Gather", plain(gather)},
      {"Add", plain(arithmetic_op)},
      {"Sub", plain(arithmetic_op)},
      {"Mul", plain(arithmetic_op)},
      {"Div", plain(arithmetic_op)},
      {"Pow", plain(pow)},
      {"Reciprocal", plain(reciprocal)},
      {"Sqrt", plain(unary)},
      {"Erf", plain(unary)},
      {"Tanh", plain(unary)},
      {"Exp", plain(unary)},
      {"Log", plain(unary)},
      {"Neg", plain(unary)},
      {"Relu", plain(unary)},
      {"Abs", plain(unary)},
      {"Sign", plain(unary)},
      {"Floor", plain(unary)},
      {"Ceil", plain(unary)},
      {"Max", plain(extremum)},
      {"Min", plain(extremum)},
      {"MatMul", plain(matmul)},
      {"Gemm", plain(gemm)},
      {"Softmax", [](Builder& b, const NodeProto& n, int64_t o) { softmax(b, n, "softmax", o); }},
      {"LogSoftmax",
       [](Builder& b, const NodeProto& n, int64_t o) { softmax(b, n, "log_softmax", o); }},
      {"LayerNormalization", plain(layer_norm)},
      {"ReduceMean", reduce},
      {"ReduceSum", reduce},
      {"ReduceMax", reduce},
      {"ReduceMin", reduce},
      {"ReduceProd", reduce},
      {"Equal", plain(binary)},
      {"Less", plain(binary)},
      {"Greater", plain(binary)},
      {"LessOrEqual", plain(binary)},
      {"GreaterOrEqual", plain(binary)},
      {"And", plain(binary)},
      {"Or", plain(binary)},
      {"Xor", plain(binary)},
      {"Not", plain(not_op)},
      {"Where", plain(where)},
  };
  return table;
}

}  // namespace

const char* registry_op(const std::string& onnx_op) {
  static const std::map<std::string, const char*> table = {
      {"Add", "add"},     {"Sub", "sub"},     {"Mul", "mul"},     {"Div", "div"},
      {"Sqrt", "sqrt"},   {"Erf", "erf"},     {"Tanh", "tanh"},   {"Exp", "exp"},
      {"Log", "log"},     {"Neg", "neg"},     {"Relu", "relu"},   {"Abs", "abs"},
      {"Sign", "sign"},   {"Floor", "floor"}, {"Ceil", "ceil"},   {"Max", "maximum"},
      {"Min", "minimum"}, {"Equal", "eq"},    {"Less", "lt"},     {"Greater", "gt"},
      {"LessOrEqual", "le"}, {"GreaterOrEqual", "ge"}, {"And", "logical_and"},
      {"Or", "logical_or"}, {"Xor", "logical_xor"}, {"Where", "where"},
      {"ReduceMean", "mean"}, {"ReduceSum", "sum"}, {"ReduceMax", "max"}, {"ReduceMin", "min"},
      {"ReduceProd", "prod"},
  };
  auto it = table.find(onnx_op);
  return it == table.end() ? nullptr : it->second;
}

void convert_node(Builder& b, const onnx::NodeProto& node, int64_t opset) {
  auto it = converters().find(node.op_type());
  if (it == converters().end()) throw Unsupported("no mapping to a Merak registry op");
  for (int i = 0; i < node.output_size(); ++i)
    MERAK_CHECK(!node.output(i).empty() || i > 0, "output 0 has no name");
  it->second(b, node, opset);
}

}  // namespace merak::graph::onnx_detail
