// matmul (batched, broadcasting, transpose flags), linear (x W^T + b as one op) and linear_gelu
// (GELU applied in the same op).
#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"
#include "merak/ops/sharding.h"

namespace merak::ops {
namespace {

// The sizes of one matmul call: out = batch x [M, N], a contraction of length K.
struct MatmulDims {
  Shape batch;  // broadcast batch dims of the output
  int64_t M = 0, N = 0, K = 0;
};

MatmulDims matmul_dims(const TensorMeta& a, const TensorMeta& b, bool ta, bool tb) {
  expect_rank_at_least(a, 2, "a");
  expect_rank_at_least(b, 2, "b");
  const Shape& as = a.shape;
  const Shape& bs = b.shape;
  const size_t ra = as.size(), rb = bs.size();
  MatmulDims d;
  d.M = ta ? as[ra - 1] : as[ra - 2];
  d.K = ta ? as[ra - 2] : as[ra - 1];
  const int64_t kb = tb ? bs[rb - 1] : bs[rb - 2];
  d.N = tb ? bs[rb - 2] : bs[rb - 1];
  MERAK_CHECK(d.K == kb, "contraction sizes differ: a ", shape_str(as), (ta ? " (transposed)" : ""),
              " has K=", d.K, ", b ", shape_str(bs), (tb ? " (transposed)" : ""), " has K=", kb);
  d.batch = broadcast_shapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2));
  return d;
}

}  // namespace

// --- matmul -------------------------------------------------------------------------------

MERAK_REGISTER_OP(matmul) {
  OpDef d;
  d.name = "matmul";
  d.doc = "op(a) @ op(b) over broadcast batch dims; op transposes the last two dims when asked";
  d.inputs = {"a", "b"};
  d.outputs = {"out"};
  d.attrs = {{"trans_a", AttrKind::Bool, AttrValue(false)},
             {"trans_b", AttrKind::Bool, AttrValue(false)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& at) {
    expect_floating(in[0], "a");
    expect_floating(in[1], "b");
    MERAK_CHECK(in[0].dtype == in[1].dtype, "a is ", dtype_name(in[0].dtype), " but b is ",
                dtype_name(in[1].dtype));
    const MatmulDims md = matmul_dims(in[0], in[1], at.b("trans_a"), at.b("trans_b"));
    Shape out = md.batch;
    out.push_back(md.M);
    out.push_back(md.N);
    return std::vector<TensorMeta>{{out, in[0].dtype}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs& at) {
    const MatmulDims md = matmul_dims(in[0], in[1], at.b("trans_a"), at.b("trans_b"));
    OpCost c;
    c.gemms = {{double(numel(md.batch)), double(md.M), double(md.N), double(md.K)}};
    c.fwd_flops = c.gemms[0].flops();
    c.bwd_flops = 2 * c.fwd_flops;  // dA and dB are one product each
    c.bytes = double(in[0].nbytes() + in[1].nbytes() + out[0].nbytes());
    return c;
  };
  // With C = op(A) op(B): each gradient is one product of dC with the other operand, its
  // transpose flags chosen so no operand is ever transposed in memory.
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dc = c.grad_outputs[0];
    if (!dc.defined()) return {Tensor(), Tensor()};
    const Tensor& a = c.inputs[0];
    const Tensor& b = c.inputs[1];
    const bool ta = c.attrs.b("trans_a"), tb = c.attrs.b("trans_b");
    Tensor da, db;
    if (c.needs_input_grad[0]) {
      da = ta ? matmul(b, dc, tb, true) : matmul(dc, b, false, !tb);
      da = sum_to(da, a.shape());
    }
    if (c.needs_input_grad[1]) {
      const Shape& bs = b.shape();
      const int64_t b_batch = numel(Shape(bs.begin(), bs.end() - 2));
      const int64_t a_batch = numel(Shape(a.shape().begin(), a.shape().end() - 2));
      if (b_batch == 1 && a_batch > 1 && !ta) {
        // b was shared by every batch entry: its gradient sums over the batch, which is one
        // product over the folded batch rows instead of a batch of products and a reduction.
        const int64_t K = a.size(-1), N = dc.size(-1);
        const Tensor a2 = reshape(a, {-1, K});
        const Tensor dc2 = reshape(dc, {-1, N});
        db = reshape(tb ? matmul(dc2, a2, true, false) : matmul(a2, dc2, true, false), bs);
      } else {
        db = tb ? matmul(dc, a, true, ta) : matmul(a, dc, !ta, false);
        db = sum_to(db, bs);
      }
    }
    return {da, db};
  };
  d.saves_inputs = 0b11;
  d.separable_grads = true;
  // Batch dims split alike on both operands (whole where broadcast). A product by a 2-D weight
  // b (as ONNX exports write linears, transposes folded) is also column-parallel (b split by
  // output features) or row-parallel (a and b split along the contraction, partial products).
  d.sharding.signatures = [](const std::vector<TensorMeta>& in,
                             const std::vector<TensorMeta>& out, const Attrs& at) {
    const Shape& y = out[0].shape;
    std::vector<SbpSignature> sigs = broadcast_splits(in, y, int64_t(y.size()) - 2);
    if (at.b("trans_a") || in[1].shape.size() != 2) return sigs;
    const bool tb = at.b("trans_b");  // b is [out, in] rather than [in, out]
    SbpSignature column{{Sbp::broadcast(), Sbp::split(tb ? 0 : 1)}, {Sbp::split(-1)}};
    SbpSignature row{{Sbp::split(-1), Sbp::split(tb ? 1 : 0)}, {Sbp::partial_sum()}};
    column.weight = row.weight = 1;
    sigs.push_back(column);
    sigs.push_back(row);
    return sigs;
  };
  // Inside a split region a batched matmul is attention written out (q k^T, then p v), its
  // split dim the heads.
  d.sharding.heads = true;
  return d;
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  static const OpDef& op = def("matmul");
  return call1(op, {a, b}, Attrs().set("trans_a", trans_a).set("trans_b", trans_b));
}

// --- linear and linear_gelu ------------------------------------------------------------

namespace {

TensorMeta infer_linear(const std::vector<TensorMeta>& in) {
  const TensorMeta& x = in[0];
  const TensorMeta& w = in[1];
  expect_floating(x, "x");
  expect_rank_at_least(x, 1, "x");
  MERAK_CHECK(w.shape.size() == 2, "weight must be [out, in], got ", shape_str(w.shape));
  MERAK_CHECK(w.dtype == x.dtype, "x is ", dtype_name(x.dtype), " but weight is ",
              dtype_name(w.dtype));
  MERAK_CHECK(x.shape.back() == w.shape[1], "x ", shape_str(x.shape), " has ", x.shape.back(),
              " features but weight ", shape_str(w.shape), " expects ", w.shape[1]);
  if (in.size() > 2 && in[2].defined) {
    const TensorMeta& b = in[2];
    MERAK_CHECK(b.shape == Shape{w.shape[0]}, "bias must be [", w.shape[0], "] for weight ",
                shape_str(w.shape), ", got ", shape_str(b.shape));
    MERAK_CHECK(b.dtype == x.dtype, "x is ", dtype_name(x.dtype), " but bias is ",
                dtype_name(b.dtype));
  }
  Shape out = x.shape;
  out.back() = w.shape[0];
  return {out, x.dtype};
}

OpCost linear_cost(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out) {
  const double mn = double(out[0].numel()), k = double(in[1].shape[1]);
  const double n = double(in[1].shape[0]);
  const bool has_bias = in.size() > 2 && in[2].defined;
  OpCost c;
  c.gemms = {{1, n > 0 ? mn / n : 0, n, k}};  // every leading dim of x is one row dim
  c.fwd_flops = 2 * mn * k + (has_bias ? mn : 0);
  c.bwd_flops = 4 * mn * k + (has_bias ? mn : 0);  // dx, dW products; db a column sum
  c.bytes = double(in[0].nbytes() + in[1].nbytes() + out[0].nbytes()) +
            (has_bias ? double(in[2].nbytes()) : 0);
  return c;
}

// The gradients of x W^T + b given the gradient dz of that product. Every leading dim of x
// folds into one row dim, so each gradient is a single 2-D product.
std::vector<Tensor> linear_grads(const BackwardCtx& c, const Tensor& dz) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const int64_t n_out = w.size(0), n_in = w.size(1);
  const Tensor dz2 = reshape(dz, {-1, n_out});
  Tensor dx, dw, db;
  if (c.needs_input_grad[0]) dx = reshape(matmul(dz2, w), x.shape());
  if (c.needs_input_grad[1]) dw = matmul(dz2, reshape(x, {-1, n_in}), true, false);
  if (c.needs_input_grad.size() > 2 && c.needs_input_grad[2]) db = sum(dz2, {0});
  std::vector<Tensor> grads = {dx, dw, db};
  grads.resize(c.inputs.size());  // bias may have been left out of the call altogether
  return grads;
}

}  // namespace

MERAK_REGISTER_OP(linear) {
  OpDef d;
  d.name = "linear";
  d.doc = "x [..., in] @ weight [out, in]^T + bias [out], the bias added in the GEMM's output pass";
  d.inputs = {"x", "weight", "bias?"};
  d.outputs = {"y"};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    return std::vector<TensorMeta>{infer_linear(in)};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) { return linear_cost(in, out); };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined()) return std::vector<Tensor>(c.inputs.size());
    return linear_grads(c, dy);
  };
  d.saves_inputs = 0b011;
  d.separable_grads = true;
  // Column-parallel: each rank computes some output features. Row-parallel: each multiplies
  // some input features, the bias added once after the partial products are summed.
  d.sharding.signatures = [](const std::vector<TensorMeta>&, const std::vector<TensorMeta>&,
                             const Attrs&) {
    SbpSignature column{{Sbp::broadcast(), Sbp::split(0), Sbp::split(0)}, {Sbp::split(-1)}};
    SbpSignature row{{Sbp::split(-1), Sbp::split(1), Sbp::partial_sum()}, {Sbp::partial_sum()}};
    column.weight = row.weight = 1;
    return std::vector<SbpSignature>{column, row};
  };
  return d;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  static const OpDef& op = def("linear");
  return call1(op, {x, weight, bias});
}

// gelu(x W^T + b) as one op, so that a backend applies GELU in the GEMM's output pass (the CPU
// GEMM's epilogue, cuBLASLt's GELU epilogue) instead of another trip through memory. The
// product before GELU is a second output that backward reads (gelu would have saved it too).
MERAK_REGISTER_OP(linear_gelu) {
  OpDef d;
  d.name = "linear_gelu";
  d.doc = "gelu(x @ weight^T + bias) with the product before GELU kept for backward";
  d.inputs = {"x", "weight", "bias?"};
  d.outputs = {"y", "pre"};
  d.attrs = {{"approximate", AttrKind::String, std::string("tanh")}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    check_gelu_mode(a.s("approximate"));
    const TensorMeta y = infer_linear(in);
    return std::vector<TensorMeta>{y, y};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    OpCost c = linear_cost(in, out);
    const double mn = double(out[0].numel());
    c.fwd_flops += 20 * mn;  // gelu's per-element costs
    c.bwd_flops += 25 * mn;
    c.bytes += double(out[1].nbytes());
    return c;
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined()) return std::vector<Tensor>(c.inputs.size());
    // In a split backward the first half leaves the GELU gradient to the second.
    if (c.carry && !c.carry->empty()) return linear_grads(c, c.carry->front());
    const Tensor dz = gelu_grad(dy, c.outputs[1], c.attrs.s("approximate"));
    if (c.carry) c.carry->push_back(dz);
    return linear_grads(c, dz);
  };
  d.saves_inputs = 0b011;
  d.saves_outputs = 0b10;
  d.grad_outputs = 1;
  d.separable_grads = true;  // the GELU gradient goes from one half to the other in ctx.carry
  // Column-parallel only: GELU of partial products is not the GELU of their sum.
  d.sharding.signatures = [](const std::vector<TensorMeta>&, const std::vector<TensorMeta>&,
                             const Attrs&) {
    SbpSignature column{{Sbp::broadcast(), Sbp::split(0), Sbp::split(0)},
                        {Sbp::split(-1), Sbp::split(-1)}};
    column.weight = 1;
    return std::vector<SbpSignature>{column};
  };
  return d;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const std::string& approximate) {
  static const OpDef& op = def("linear_gelu");
  return call(op, {x, weight, bias}, Attrs().set("approximate", approximate))[0];
}

}  // namespace merak::ops
