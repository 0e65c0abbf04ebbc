// Shape ops. reshape, permute, transpose, slice, expand and split are views (no kernel, no copy
// when the layout allows); contiguous copies only a strided input; concat and slice_grad (the
// zero-padding inverse of slice) run kernels.
#include <limits>
#include <numeric>

#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"
#include "merak/ops/sharding.h"

namespace merak::ops {
namespace {

// Views move no data.
OpCost free_cost(const std::vector<TensorMeta>&, const std::vector<TensorMeta>&, const Attrs&) {
  return OpCost{};
}

// Reads and writes every element once.
OpCost copy_cost(const std::vector<TensorMeta>&, const std::vector<TensorMeta>& out,
                 const Attrs&) {
  OpCost c;
  for (const auto& o : out) c.bytes += 2.0 * double(o.nbytes());
  return c;
}

// Python slice bounds: negative counts from the end, then clamp to [0, n]; end < start is empty.
std::pair<int64_t, int64_t> slice_bounds(int64_t start, int64_t end, int64_t n) {
  auto fix = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t(0), n); };
  const int64_t s = fix(start), e = fix(end);
  return {s, std::max(s, e)};
}

// expand's target with -1 (keep the input's size) resolved; checks broadcast compatibility.
Shape expand_target(const Shape& in, const Shape& target) {
  MERAK_CHECK(target.size() >= in.size(), "cannot expand x ", shape_str(in), " to fewer dims ",
              shape_str(target));
  const size_t lead = target.size() - in.size();
  Shape out = target;
  for (size_t i = 0; i < target.size(); ++i) {
    if (i >= lead && out[i] == -1) out[i] = in[i - lead];
    // Checked in every dim: an input size of 1 would let any other negative size through below.
    MERAK_CHECK(out[i] >= 0, "cannot expand x ", shape_str(in), " to ", shape_str(target),
                ": negative size in dim ", i, i < lead ? " (-1 keeps an existing dim only)" : "");
    if (i < lead) continue;
    const int64_t s = in[i - lead];
    MERAK_CHECK(s == out[i] || s == 1, "cannot expand x ", shape_str(in), " to ",
                shape_str(target));
  }
  return out;
}

std::vector<int64_t> check_permutation(const std::vector<int64_t>& order, int64_t rank) {
  MERAK_CHECK(int64_t(order.size()) == rank, "order has ", order.size(), " dims, x has ", rank);
  std::vector<int64_t> out(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    out[i] = normalize_dim(order[i], rank);
    MERAK_CHECK(!seen[size_t(out[i])], "order repeats dim ", order[i]);
    seen[size_t(out[i])] = true;
  }
  return out;
}

// The split sizes along dim, checked to cover it exactly.
void check_split(const Shape& s, int64_t dim, const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (int64_t n : sizes) {
    MERAK_CHECK(n >= 0, "negative size ", n, " in sizes");
    // Checked before the sum, which huge sizes would overflow.
    MERAK_CHECK(n <= s[size_t(dim)] - total, "sizes ", shape_str(sizes), " sum to more than ",
                s[size_t(dim)], ", x ", shape_str(s), " along dim ", dim);
    total += n;
  }
  MERAK_CHECK(total == s[size_t(dim)], "sizes sum to ", total, ", x ", shape_str(s), " has ",
              s[size_t(dim)], " along dim ", dim);
}

}  // namespace

// --- reshape: a view when the strides allow it, else a copy; dx = dy reshaped back ---
MERAK_REGISTER_OP(reshape) {
  OpDef d;
  d.name = "reshape";
  d.doc = "x with a new shape of the same size (-1 inferred); a view unless strides forbid it";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"shape", AttrKind::Ints, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return std::vector<TensorMeta>{{infer_reshape(a.ints("shape"), in[0].numel()), in[0].dtype}};
  };
  d.cost = free_cost;
  // A rank's piece of y is its piece of x reshaped: the target shape names the local size.
  d.sharding.follows_elements = true;
  d.sharding.localize = [](const Attrs& a, const LocalDim& piece) {
    std::vector<int64_t> target = a.ints("shape");
    if (target[size_t(piece.dim)] != -1) target[size_t(piece.dim)] = piece.local;  // -1 infers it
    return Attrs(a).set("shape", target);
  };
  d.view = [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
    const Tensor& x = in[0];
    if (!x.is_contiguous()) {
      // Some strided layouts still fold into the new shape; Tensor::view says which.
      try {
        return {x.view(a.ints("shape"))};
      } catch (const Error&) {
        return {x.clone().view(a.ints("shape"))};
      }
    }
    return {x.view(a.ints("shape"))};
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? reshape(g, c.inputs[0].shape()) : Tensor()};
  };
  return d;
}

// --- permute: y dim i = x dim order[i]; dx = dy permuted by the inverse order ---
MERAK_REGISTER_OP(permute) {
  OpDef d;
  d.name = "permute";
  d.doc = "view of x with its dims reordered: y dim i is x dim order[i]";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"order", AttrKind::Ints, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const Shape& s = in[0].shape;
    const auto order = check_permutation(a.ints("order"), int64_t(s.size()));
    Shape out(s.size());
    for (size_t i = 0; i < order.size(); ++i) out[i] = s[size_t(order[i])];
    return std::vector<TensorMeta>{{out, in[0].dtype}};
  };
  d.cost = free_cost;
  d.sharding.signatures = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&,
                             const Attrs& a) {
    const auto order = check_permutation(a.ints("order"), int64_t(in[0].shape.size()));
    std::vector<SbpSignature> out;
    for (size_t i = 0; i < order.size(); ++i)
      out.push_back({{Sbp::split(order[i])}, {Sbp::split(int64_t(i))}});
    return out;
  };
  d.view = [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
    return {in[0].permute(a.ints("order"))};
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const auto order = check_permutation(c.attrs.ints("order"), g.dim());
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[size_t(order[i])] = int64_t(i);
    return {permute(g, inverse)};
  };
  return d;
}

// --- transpose: swaps two dims; its own inverse ---
MERAK_REGISTER_OP(transpose) {
  OpDef d;
  d.name = "transpose";
  d.doc = "view of x with dims dim0 and dim1 swapped";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"dim0", AttrKind::Int, std::nullopt}, {"dim1", AttrKind::Int, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    Shape s = in[0].shape;
    const int64_t r = int64_t(s.size());
    std::swap(s[size_t(normalize_dim(a.i("dim0"), r))], s[size_t(normalize_dim(a.i("dim1"), r))]);
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  d.cost = free_cost;
  d.sharding.signatures = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&,
                             const Attrs& a) {
    const int64_t r = int64_t(in[0].shape.size());
    const int64_t d0 = normalize_dim(a.i("dim0"), r), d1 = normalize_dim(a.i("dim1"), r);
    std::vector<SbpSignature> out;
    for (int64_t x = 0; x < r; ++x) {
      const int64_t y = x == d0 ? d1 : x == d1 ? d0 : x;
      out.push_back({{Sbp::split(x)}, {Sbp::split(y)}});
    }
    return out;
  };
  d.view = [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
    return {in[0].transpose(a.i("dim0"), a.i("dim1"))};
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? transpose(g, c.attrs.i("dim0"), c.attrs.i("dim1")) : Tensor()};
  };
  return d;
}

// --- slice: x[start:end] along dim (Python bounds); dx = dy zero-padded back (slice_grad) ---
MERAK_REGISTER_OP(slice) {
  OpDef d;
  d.name = "slice";
  d.doc = "view of x[start:end] along dim; negative bounds count from the end, clamped";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"dim", AttrKind::Int, std::nullopt},
             {"start", AttrKind::Int, int64_t(0)},
             {"end", AttrKind::Int, std::numeric_limits<int64_t>::max()}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    Shape s = in[0].shape;
    const size_t dim = size_t(normalize_dim(a.i("dim"), int64_t(s.size())));
    const auto [lo, hi] = slice_bounds(a.i("start"), a.i("end"), s[dim]);
    s[dim] = hi - lo;
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  d.cost = free_cost;
  d.view = [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
    const Tensor& x = in[0];
    const int64_t dim = normalize_dim(a.i("dim"), x.dim());
    const auto [lo, hi] = slice_bounds(a.i("start"), a.i("end"), x.size(dim));
    return {x.narrow(dim, lo, hi - lo)};
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const Tensor& x = c.inputs[0];
    const int64_t dim = normalize_dim(c.attrs.i("dim"), x.dim());
    const int64_t lo = slice_bounds(c.attrs.i("start"), c.attrs.i("end"), x.size(dim)).first;
    return {call1(def("slice_grad"), {g},
                  Attrs().set("dim", dim).set("start", lo).set("size", x.size(dim)))};
  };
  return d;
}

// --- slice_grad: dy placed at [start, start + len) along dim of zeros sized `size`; the
// adjoint of slice, so its own gradient is that slice ---
MERAK_REGISTER_OP(slice_grad) {
  OpDef d;
  d.name = "slice_grad";
  d.doc = "zeros with `size` entries along dim, dy written at [start, start + dy's length)";
  d.inputs = {"dy"};
  d.outputs = {"dx"};
  d.attrs = {{"dim", AttrKind::Int, std::nullopt},
             {"start", AttrKind::Int, std::nullopt},
             {"size", AttrKind::Int, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    Shape s = in[0].shape;
    const size_t dim = size_t(normalize_dim(a.i("dim"), int64_t(s.size())));
    const int64_t start = a.i("start"), size = a.i("size");
    MERAK_CHECK(start >= 0 && start + s[dim] <= size, "dy ", shape_str(s), " at start ", start,
                " does not fit in size ", size, " along dim ", dim);
    s[dim] = size;
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  d.cost = copy_cost;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const int64_t start = c.attrs.i("start");
    return {slice(g, c.attrs.i("dim"), start, start + c.inputs[0].size(c.attrs.i("dim")))};
  };
  return d;
}

// --- expand: broadcasts size-1 dims (stride 0, no copy); dx = dy summed back (sum_to) ---
MERAK_REGISTER_OP(expand) {
  OpDef d;
  d.name = "expand";
  d.doc = "view of x broadcast to shape (size-1 dims repeat; -1 keeps a dim; new dims lead)";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"shape", AttrKind::Ints, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return std::vector<TensorMeta>{{expand_target(in[0].shape, a.ints("shape")), in[0].dtype}};
  };
  // Free forward; the backward sums the broadcast gradient back.
  d.cost = [](const std::vector<TensorMeta>&, const std::vector<TensorMeta>& out, const Attrs&) {
    OpCost c;
    c.bwd_flops = double(out[0].numel());
    return c;
  };
  d.view = [](const std::vector<Tensor>& in, const Attrs& a) -> std::vector<Tensor> {
    return {in[0].expand(expand_target(in[0].shape(), a.ints("shape")))};
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    return {g.defined() ? sum_to(g, c.inputs[0].shape()) : Tensor()};
  };
  return d;
}

// --- concat: joins inputs along dim; dx_i = the matching split of dy ---
MERAK_REGISTER_OP(concat) {
  OpDef d;
  d.name = "concat";
  d.doc = "inputs joined along dim (same dtype, equal sizes elsewhere)";
  d.inputs = {"xs"};
  d.variadic = true;
  d.outputs = {"y"};
  d.attrs = {{"dim", AttrKind::Int, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    Shape s = in[0].shape;
    MERAK_CHECK(!s.empty(), "cannot concat scalars");
    const size_t dim = size_t(normalize_dim(a.i("dim"), int64_t(s.size())));
    for (size_t i = 1; i < in.size(); ++i) {
      const Shape& t = in[i].shape;
      MERAK_CHECK(in[i].dtype == in[0].dtype, "input ", i, " is ", dtype_name(in[i].dtype),
                  ", input 0 is ", dtype_name(in[0].dtype));
      bool ok = t.size() == s.size();
      for (size_t k = 0; ok && k < t.size(); ++k) ok = k == dim || t[k] == s[k];
      MERAK_CHECK(ok, "input ", i, " ", shape_str(t), " does not match input 0 ",
                  shape_str(in[0].shape), " outside dim ", dim);
      MERAK_CHECK(!__builtin_add_overflow(s[dim], t[dim], &s[dim]), "the inputs' sizes along dim ",
                  dim, " overflow int64");
    }
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  d.cost = copy_cost;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return std::vector<Tensor>(c.inputs.size());
    const int64_t dim = normalize_dim(c.attrs.i("dim"), g.dim());
    std::vector<int64_t> sizes;
    for (const Tensor& x : c.inputs) sizes.push_back(x.size(dim));
    return split(g, sizes, dim);
  };
  return d;
}

// --- split: views of consecutive pieces along dim, one output per size; dx = concat of the dys ---
MERAK_REGISTER_OP(split) {
  OpDef d;
  d.name = "split";
  d.doc = "views of x cut along dim into pieces of the given sizes (one output per size)";
  d.inputs = {"x"};
  d.outputs = {"pieces"};  // as many as sizes
  d.attrs = {{"sizes", AttrKind::Ints, std::nullopt}, {"dim", AttrKind::Int, int64_t(0)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const Shape& s = in[0].shape;
    MERAK_CHECK(!s.empty(), "cannot split a scalar");
    const int64_t dim = normalize_dim(a.i("dim"), int64_t(s.size()));
    check_split(s, dim, a.ints("sizes"));
    std::vector<TensorMeta> out;
    for (int64_t n : a.ints("sizes")) {
      Shape piece = s;
      piece[size_t(dim)] = n;
      out.push_back({piece, in[0].dtype});
    }
    return out;
  };
  d.cost = free_cost;
  // Every piece keeps the other dims whole, so they split as x does; along `dim` they do not.
  d.sharding.signatures = [](const std::vector<TensorMeta>& in,
                             const std::vector<TensorMeta>& out, const Attrs& a) {
    return alike_splits(in, out.size(), normalize_dim(a.i("dim"), int64_t(in[0].shape.size())));
  };
  d.view = [](const std::vector<Tensor>& in, const Attrs& a) {
    const Tensor& x = in[0];
    const int64_t dim = normalize_dim(a.i("dim"), x.dim());
    std::vector<Tensor> out;
    int64_t start = 0;
    for (int64_t n : a.ints("sizes")) {
      out.push_back(x.narrow(dim, start, n));
      start += n;
    }
    return out;
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const auto& gs = c.grad_outputs;
    const Tensor& x = c.inputs[0];
    const int64_t dim = normalize_dim(c.attrs.i("dim"), x.dim());
    const auto& sizes = c.attrs.ints("sizes");
    std::vector<size_t> have;
    for (size_t i = 0; i < gs.size(); ++i)
      if (gs[i].defined()) have.push_back(i);
    if (have.empty()) return {Tensor()};
    std::vector<int64_t> starts(sizes.size(), 0);
    for (size_t i = 1; i < sizes.size(); ++i) starts[i] = starts[i - 1] + sizes[i - 1];
    const OpDef& pad = def("slice_grad");
    auto place = [&](const Tensor& g, int64_t start, int64_t size) {
      return call1(pad, {g}, Attrs().set("dim", dim).set("start", start).set("size", size));
    };
    // One piece with a gradient: pad it with zeros in one op.
    if (have.size() == 1) return {place(gs[have[0]], starts[have[0]], x.size(dim))};
    // Several: concat, with zeros (an empty slice padded out, which works on any device) for
    // the pieces that got none.
    const Tensor empty = slice(gs[have[0]], dim, 0, 0);
    std::vector<Tensor> parts;
    for (size_t i = 0; i < gs.size(); ++i)
      parts.push_back(gs[i].defined() ? gs[i] : place(empty, 0, sizes[i]));
    return {concat(parts, dim)};
  };
  return d;
}

// --- contiguous: x itself (as a fresh view) when dense, else a row-major copy; dx = dy ---
MERAK_REGISTER_OP(contiguous) {
  OpDef d;
  d.name = "contiguous";
  d.doc = "a row-major copy of a strided x; a view of x when it is already contiguous";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    return std::vector<TensorMeta>{in[0]};
  };
  d.cost = copy_cost;
  d.sharding = elementwise_sharding();
  // Returns a new view (never the input tensor itself) so autograd can record it.
  d.view = [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
    return {in[0].is_contiguous() ? in[0].detach() : in[0].clone()};
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> { return {c.grad_outputs[0]}; };
  return d;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  static const OpDef& op = def("reshape");
  return call1(op, {x}, Attrs().set("shape", shape));
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
  static const OpDef& op = def("permute");
  return call1(op, {x}, Attrs().set("order", order));
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  static const OpDef& op = def("transpose");
  return call1(op, {x}, Attrs().set("dim0", dim0).set("dim1", dim1));
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  static const OpDef& op = def("slice");
  return call1(op, {x}, Attrs().set("dim", dim).set("start", start).set("end", end));
}

Tensor expand(const Tensor& x, const Shape& shape) {
  static const OpDef& op = def("expand");
  return call1(op, {x}, Attrs().set("shape", shape));
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  static const OpDef& op = def("concat");
  return call1(op, xs, Attrs().set("dim", dim));
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  static const OpDef& op = def("split");
  return call(op, {x}, Attrs().set("sizes", sizes).set("dim", dim));
}

Tensor contiguous(const Tensor& x) {
  // A dense tensor needs no copy and no graph node.
  if (x.is_contiguous()) return x;
  static const OpDef& op = def("contiguous");
  return call1(op, {x});
}

}  // namespace merak::ops
