// Reductions: sum, mean, max, min, prod over a set of dims (empty = all), with or without
// keepdim; and sum_to, the inverse of broadcasting, composed from sum and reshape.
#include <algorithm>

#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"

namespace merak::ops {
namespace {

// Which dims of a rank-`rank` input are reduced: empty `dims` = all of them. A scalar accepts
// dim 0/-1 (as NumPy does) and has nothing to reduce.
std::vector<bool> reduced_dims(int64_t rank, const std::vector<int64_t>& dims) {
  std::vector<bool> mask(size_t(rank), dims.empty());
  for (int64_t d : dims) {
    if (rank == 0) {
      MERAK_CHECK(d == 0 || d == -1, "dim ", d, " out of range for a scalar");
      continue;
    }
    const int64_t n = normalize_dim(d, rank);
    MERAK_CHECK(!mask[n], "dim ", d, " listed twice in dims");
    mask[n] = true;
  }
  return mask;
}

// The input shape with reduced dims set to 1 (the keepdim output shape).
Shape keepdim_shape(const Shape& in, const std::vector<bool>& mask) {
  Shape out = in;
  for (size_t d = 0; d < in.size(); ++d)
    if (mask[d]) out[d] = 1;
  return out;
}

// Number of input elements folded into each output element.
int64_t reduced_count(const Shape& in, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (size_t d = 0; d < in.size(); ++d)
    if (mask[d]) n *= in[d];
  return n;
}

std::vector<TensorMeta> infer_reduce(const std::vector<TensorMeta>& in, const Attrs& a,
                                     bool needs_nonempty) {
  expect_floating(in[0], "x");
  const Shape& s = in[0].shape;
  const auto mask = reduced_dims(int64_t(s.size()), a.ints("dims"));
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (mask[d] && needs_nonempty)
      MERAK_CHECK(s[d] > 0, "x ", shape_str(s), " is empty along reduced dim ", d);
    if (!mask[d]) out.push_back(s[d]);
    else if (a.b("keepdim")) out.push_back(1);
  }
  return {TensorMeta{out, in[0].dtype}};
}

std::vector<AttrSpec> reduce_attrs() {
  return {{"dims", AttrKind::Ints, std::vector<int64_t>{}}, {"keepdim", AttrKind::Bool, false}};
}

OpCost reduce_cost(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
                   double bwd_per_element) {
  OpCost c;
  c.fwd_flops = double(in[0].numel());
  c.bwd_flops = bwd_per_element * double(in[0].numel());
  c.bytes = double(in[0].nbytes() + out[0].nbytes());
  return c;
}

// The output gradient broadcast back over the input: reshape to the keepdim shape, expand, and
// copy so the input gradient is dense.
Tensor expand_back(const Tensor& g, const Shape& in_shape, const std::vector<bool>& mask) {
  return contiguous(expand(reshape(g, keepdim_shape(in_shape, mask)), in_shape));
}

}  // namespace

// --- sum: y = sum of x over dims; dx = dy broadcast back ---
MERAK_REGISTER_OP(sum) {
  OpDef d;
  d.name = "sum";
  d.doc = "sum of x over dims (empty = all), keeping reduced dims as 1 when keepdim";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = reduce_attrs();
  d.infer = [](const auto& in, const Attrs& a) { return infer_reduce(in, a, false); };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return reduce_cost(in, out, 1); };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const Shape& s = c.inputs[0].shape();
    return {expand_back(g, s, reduced_dims(int64_t(s.size()), c.attrs.ints("dims")))};
  };
  return d;
}

// --- mean: y = sum / count; dx = dy / count broadcast back ---
MERAK_REGISTER_OP(mean) {
  OpDef d;
  d.name = "mean";
  d.doc = "mean of x over dims (empty = all), keeping reduced dims as 1 when keepdim";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = reduce_attrs();
  d.infer = [](const auto& in, const Attrs& a) { return infer_reduce(in, a, false); };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return reduce_cost(in, out, 1); };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const Shape& s = c.inputs[0].shape();
    const auto mask = reduced_dims(int64_t(s.size()), c.attrs.ints("dims"));
    // Scale the (small) output gradient before broadcasting it.
    const double count = double(reduced_count(s, mask));
    return {expand_back(mul_scalar(g, 1.0 / count), s, mask)};
  };
  return d;
}

// --- max, min: y = max (min) of x over dims, NaN propagating; dx splits dy evenly among the
//     elements equal to y ---
namespace {
OpDef extremum_def(const char* name, const char* doc) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = reduce_attrs();
  d.infer = [](const auto& in, const Attrs& a) { return infer_reduce(in, a, true); };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return reduce_cost(in, out, 5); };
  d.saves_inputs = 1;
  d.saves_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const Tensor& x = c.inputs[0];
    const auto mask = reduced_dims(x.dim(), c.attrs.ints("dims"));
    const Shape ks = keepdim_shape(x.shape(), mask);
    // is_y broadcasts y over the reduced dims; ties share the gradient: dy / (number of ties).
    const Tensor is_y = cast(eq(x, reshape(c.outputs[0], ks)), x.dtype());
    const Tensor ties = sum(is_y, c.attrs.ints("dims"), true);
    return {mul(is_y, div(reshape(g, ks), ties))};
  };
  return d;
}
}  // namespace

MERAK_REGISTER_OP(max) {
  return extremum_def("max", "max of x over dims (empty = all); ties share the gradient evenly");
}
MERAK_REGISTER_OP(min) {
  return extremum_def("min", "min of x over dims (empty = all); ties share the gradient evenly");
}

// --- prod: y = product of x over dims (1 where empty). No backward: dy * y / x fails at zeros,
//     and no model differentiates a product; ONNX import folds constant ones. ---
MERAK_REGISTER_OP(prod) {
  OpDef d;
  d.name = "prod";
  d.doc = "product of x over dims (empty = all), keeping reduced dims as 1 when keepdim";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = reduce_attrs();
  d.infer = [](const auto& in, const Attrs& a) { return infer_reduce(in, a, false); };
  d.cost = [](const auto& in, const auto& out, const Attrs&) { return reduce_cost(in, out, 0); };
  return d;
}

namespace {
Tensor reduce_call(const OpDef& op, const Tensor& x, const std::vector<int64_t>& dims,
                   bool keepdim) {
  return call1(op, {x}, Attrs().set("dims", dims).set("keepdim", keepdim));
}
}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  static const OpDef& op = def("sum");
  return reduce_call(op, x, dims, keepdim);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  static const OpDef& op = def("mean");
  return reduce_call(op, x, dims, keepdim);
}

Tensor max(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  static const OpDef& op = def("max");
  return reduce_call(op, x, dims, keepdim);
}

Tensor min(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  static const OpDef& op = def("min");
  return reduce_call(op, x, dims, keepdim);
}

Tensor prod(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  static const OpDef& op = def("prod");
  return reduce_call(op, x, dims, keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  const Shape& xs = x.shape();
  if (xs == shape) return x;
  const int64_t lead = x.dim() - int64_t(shape.size());
  MERAK_CHECK(lead >= 0, "sum_to: cannot sum ", x.str(), " to the larger shape ", shape_str(shape));
  // Sum the leading extra dims and every dim the target holds as 1 (broadcast ones).
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t src = xs[size_t(lead) + i];
    MERAK_CHECK(shape[i] == src || shape[i] == 1, "sum_to: ", x.str(),
                " is not a broadcast of ", shape_str(shape));
    if (shape[i] == 1 && src != 1) dims.push_back(lead + int64_t(i));
  }
  return reshape(sum(x, dims, true), shape);
}

}  // namespace merak::ops
