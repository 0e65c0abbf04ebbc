// Scaled dot-product attention (flash-style: the forward saves a log-sum-exp per query row, in
// stat_dtype so f32 for 16-bit q, and the backward recomputes probabilities from it, so no
// Tq x Tk matrix outlives a kernel call).
#include <cmath>

#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"

namespace merak::ops {
namespace {

// Checks q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv], mask bool [B, Tk] and returns out's
// shape [B, H, Tq, Dv].
Shape attention_out_shape(const TensorMeta& q, const TensorMeta& k, const TensorMeta& v,
                          const TensorMeta* mask) {
  expect_floating(q, "q");
  MERAK_CHECK(q.shape.size() == 4, "q must be [B, H, Tq, D], got ", shape_str(q.shape));
  MERAK_CHECK(k.shape.size() == 4, "k must be [B, H, Tk, D], got ", shape_str(k.shape));
  MERAK_CHECK(v.shape.size() == 4, "v must be [B, H, Tk, Dv], got ", shape_str(v.shape));
  MERAK_CHECK(k.dtype == q.dtype && v.dtype == q.dtype, "q, k, v dtypes differ: ",
              dtype_name(q.dtype), ", ", dtype_name(k.dtype), ", ", dtype_name(v.dtype));
  MERAK_CHECK(k.shape[0] == q.shape[0] && k.shape[1] == q.shape[1] && k.shape[3] == q.shape[3],
              "k ", shape_str(k.shape), " does not match q ", shape_str(q.shape),
              " in batch, heads or head dim");
  MERAK_CHECK(v.shape[0] == k.shape[0] && v.shape[1] == k.shape[1] && v.shape[2] == k.shape[2],
              "v ", shape_str(v.shape), " does not match k ", shape_str(k.shape),
              " in batch, heads or keys");
  if (mask && mask->defined) {
    MERAK_CHECK(mask->dtype == DType::Bool, "key_padding_mask must be bool, got ",
                dtype_name(mask->dtype));
    MERAK_CHECK(mask->shape == (Shape{k.shape[0], k.shape[2]}),
                "key_padding_mask must be [B, Tk] = [", k.shape[0], ", ", k.shape[2], "], got ",
                shape_str(mask->shape));
  }
  return {q.shape[0], q.shape[1], q.shape[2], v.shape[3]};
}

// (query, key) pairs that are computed, per head: causal attention skips the upper triangle.
double attended_pairs(int64_t tq, int64_t tk, bool causal) {
  if (!causal) return double(tq) * double(tk);
  double n = 0;
  for (int64_t i = 0; i < tq; ++i) n += double(std::min(tk, std::max<int64_t>(0, i + tk - tq + 1)));
  return n;
}

// Dropout of the probabilities (rate `dropout`) draws element (b, h, i, j) of the unsplit
// [B, heads, Tq, Tk] from word i % 4 of Philox(key, counter (((first_row + b) * heads + h) *
// ceil(Tq / 4) + i / 4) * Tk + j, stream): one block serves four query rows, a tensor-parallel
// rank holding heads [head_start, head_start + H) of `heads` (0: all of them) draws the
// unsplit run's masks, and a micro-batch whose first sample is row first_row of the global
// batch draws that batch's (set by the graph executor, as dropout's; `rows`, which dropout
// needs, is declared alike and unused). Kept probabilities are scaled by 1 / (1 - dropout).
std::vector<AttrSpec> attention_attrs() {
  return {{"causal", AttrKind::Bool, AttrValue(false)},
          {"scale", AttrKind::Float, AttrValue(0.0)},
          {"dropout", AttrKind::Float, AttrValue(0.0)},
          {"key", AttrKind::Int, AttrValue(int64_t(0))},
          {"stream", AttrKind::Int, AttrValue(int64_t(0))},
          {"first_row", AttrKind::Int, AttrValue(int64_t(0))},
          {"rows", AttrKind::Int, AttrValue(int64_t(0))},
          {"head_start", AttrKind::Int, AttrValue(int64_t(0))},
          {"heads", AttrKind::Int, AttrValue(int64_t(0))}};
}

void check_dropout(const TensorMeta& q, const Attrs& a) {
  const double p = a.f("dropout");
  MERAK_CHECK(p >= 0 && p < 1, "dropout must be in [0, 1), got ", p);
  const int64_t heads = a.i("heads"), start = a.i("head_start");
  MERAK_CHECK(start >= 0 && (heads == 0 ? start == 0 : start + q.shape[1] <= heads),
              "heads [", start, ", ", start + q.shape[1], ") do not lie within the ",
              heads, " heads of the unsplit attention");
  MERAK_CHECK(a.i("first_row") >= 0, "first_row ", a.i("first_row"), " must not be negative");
}

// Philox blocks drawn per (query, key) pair: one per four rows, about 40 integer operations a
// block, in each pass over the pairs: the forward's one, the backward's two on a GPU (its dQ
// and dK/dV kernels; the CPU's backward draws once).
double dropout_flops(const TensorMeta& q, const TensorMeta& k, bool causal, const Attrs& a) {
  if (a.f("dropout") == 0) return 0;
  return double(q.shape[0] * q.shape[1]) * attended_pairs(q.shape[2], k.shape[2], causal) * 10;
}

// Backward FLOPs of one call: recompute Q K^T, then dO V^T, dS K, dS^T Q, P^T dO (five products)
// plus a few elementwise passes over the probability blocks.
double attention_bwd_flops(const TensorMeta& q, const TensorMeta& k, const TensorMeta& v,
                           bool causal) {
  const double heads = double(q.shape[0] * q.shape[1]);
  const double pairs = attended_pairs(q.shape[2], k.shape[2], causal);
  const double d = double(q.shape[3]), dv = double(v.shape[3]);
  return heads * pairs * (2 * d + 2 * dv + 2 * d + 2 * d + 2 * dv + 8);
}

}  // namespace

// --- sdpa ---------------------------------------------------------------------------------

MERAK_REGISTER_OP(sdpa) {
  OpDef d;
  d.name = "sdpa";
  d.doc = "dropout(softmax(scale * q k^T, masked)) v per (batch, head), with the row log-sum-exp";
  d.inputs = {"q", "k", "v", "key_padding_mask?"};
  d.outputs = {"out", "lse"};
  d.attrs = attention_attrs();
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const TensorMeta* mask = in.size() > 3 ? &in[3] : nullptr;
    const Shape out = attention_out_shape(in[0], in[1], in[2], mask);
    check_dropout(in[0], a);
    const Shape lse(in[0].shape.begin(), in[0].shape.end() - 1);
    return std::vector<TensorMeta>{{out, in[0].dtype}, {lse, stat_dtype(in[0].dtype)}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs& at) {
    const TensorMeta &q = in[0], &k = in[1], &v = in[2];
    const bool causal = at.b("causal");
    const double heads = double(q.shape[0] * q.shape[1]);
    const double pairs = attended_pairs(q.shape[2], k.shape[2], causal);
    OpCost c;
    // Q K^T and P V, plus max / exp / sum / normalise over each score.
    c.fwd_flops = heads * pairs * (2 * double(q.shape[3]) + 2 * double(v.shape[3]) + 5) +
                  dropout_flops(q, k, causal, at);
    c.bwd_flops = attention_bwd_flops(q, k, v, causal) + 2 * dropout_flops(q, k, causal, at);
    for (const auto& m : in)
      if (m.defined) c.bytes += double(m.nbytes());
    for (const auto& m : out) c.bytes += double(m.nbytes());
    return c;
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dout = c.grad_outputs[0];
    std::vector<Tensor> grads(c.inputs.size());
    if (!dout.defined()) return grads;
    const Tensor mask = c.inputs.size() > 3 ? c.inputs[3] : Tensor();
    static const OpDef& grad_op = def("sdpa_grad");
    const std::vector<Tensor> g = call(
        grad_op, {dout, c.inputs[0], c.inputs[1], c.inputs[2], mask, c.outputs[0], c.outputs[1]},
        c.attrs);
    for (int i = 0; i < 3; ++i)
      if (c.needs_input_grad[i]) grads[i] = g[i];
    return grads;
  };
  d.saves_inputs = 0b1111;
  d.saves_outputs = 0b11;
  d.grad_outputs = 1;
  // Heads are independent: q, k, v, out and lse split along dim 1 alike, the mask whole (it is
  // per batch and key, not per head). Differing head counts (grouped k and v) do not split.
  d.sharding.signatures = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&,
                             const Attrs&) {
    const int64_t heads = in[0].shape[1];
    if (in[1].shape[1] != heads || in[2].shape[1] != heads) return std::vector<SbpSignature>{};
    const Sbp h = Sbp::split(1);
    return std::vector<SbpSignature>{{{h, h, h, Sbp::broadcast()}, {h, h}}};
  };
  d.sharding.heads = true;
  // A rank's heads draw the dropout masks the unsplit run's same heads draw.
  d.sharding.localize = [](const Attrs& a, const LocalDim& piece) {
    MERAK_CHECK(piece.dim == 1 && piece.ranges == 1, "sdpa splits over heads (dim 1) in one "
                "run of heads a rank, not dim ", piece.dim, " in ", piece.ranges, " runs");
    return Attrs(a)
        .set("head_start", a.i("head_start") + piece.start)
        .set("heads", a.i("heads") > 0 ? a.i("heads") : piece.size);
  };
  d.random = {"dropout", /*identity_at_zero=*/false};
  return d;
}

Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
            bool causal, double scale, const AttentionDropout& dropout) {
  static const OpDef& op = def("sdpa");
  Attrs a = Attrs().set("causal", causal).set("scale", scale);
  if (dropout.p > 0)
    a.set("dropout", dropout.p).set("key", int64_t(dropout.key)).set("stream",
                                                                     int64_t(dropout.stream));
  return call(op, {q, k, v, key_padding_mask}, a)[0];
}

// --- sdpa_grad ----------------------------------------------------------------------------

MERAK_REGISTER_OP(sdpa_grad) {
  OpDef d;
  d.name = "sdpa_grad";
  d.doc = "dq, dk, dv of sdpa from dout, recomputing probabilities block by block from lse";
  d.inputs = {"dout", "q", "k", "v", "key_padding_mask?", "out", "lse"};
  d.outputs = {"dq", "dk", "dv"};
  d.attrs = attention_attrs();
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const TensorMeta &dout = in[0], &q = in[1], &k = in[2], &v = in[3], &out = in[5], &lse = in[6];
    const Shape out_shape = attention_out_shape(q, k, v, &in[4]);
    MERAK_CHECK(dout.shape == out_shape && dout.dtype == q.dtype, "dout must be ",
                dtype_name(q.dtype), shape_str(out_shape), ", got ", dtype_name(dout.dtype),
                shape_str(dout.shape));
    MERAK_CHECK(out.shape == out_shape && out.dtype == q.dtype, "out must be ",
                dtype_name(q.dtype), shape_str(out_shape), ", got ", dtype_name(out.dtype),
                shape_str(out.shape));
    const Shape lse_shape(q.shape.begin(), q.shape.end() - 1);
    const DType lse_dtype = stat_dtype(q.dtype);
    MERAK_CHECK(lse.shape == lse_shape && lse.dtype == lse_dtype, "lse must be ",
                dtype_name(lse_dtype), shape_str(lse_shape), " (sdpa's for ", dtype_name(q.dtype),
                " q), got ", dtype_name(lse.dtype), shape_str(lse.shape));
    check_dropout(q, a);
    return std::vector<TensorMeta>{{q.shape, q.dtype}, {k.shape, k.dtype}, {v.shape, v.dtype}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs& at) {
    OpCost c;
    c.fwd_flops = attention_bwd_flops(in[1], in[2], in[3], at.b("causal")) +
                  2 * dropout_flops(in[1], in[2], at.b("causal"), at);
    for (const auto& m : in)
      if (m.defined) c.bytes += double(m.nbytes());
    for (const auto& m : out) c.bytes += double(m.nbytes());
    return c;
  };
  return d;
}

}  // namespace merak::ops
