// Neural-network ops: softmax, log_softmax, layer_norm, embedding, cross_entropy, dropout, and
// the fused gradient ops their backwards call (so a backward is one kernel, not a chain of
// elementwise ops, and depends on nothing outside this file).
#include <cmath>

#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"
#include "merak/ops/sharding.h"

namespace merak::ops {
namespace {

Shape without_last(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

double io_bytes(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out) {
  double b = 0;
  for (const auto& m : in)
    if (m.defined) b += double(m.nbytes());
  for (const auto& m : out) b += double(m.nbytes());
  return b;
}

void expect_index(const TensorMeta& m, const char* what) {
  MERAK_CHECK(m.dtype == DType::I32 || m.dtype == DType::I64, what, " must be i32 or i64, got ",
              dtype_name(m.dtype));
}

void expect_same(const TensorMeta& a, const char* a_name, const TensorMeta& b, const char* b_name) {
  MERAK_CHECK(a.shape == b.shape && a.dtype == b.dtype, a_name, " ", dtype_name(a.dtype),
              shape_str(a.shape), " must match ", b_name, " ", dtype_name(b.dtype),
              shape_str(b.shape));
}

int64_t check_dim(const TensorMeta& x, const Attrs& a) {
  const int64_t rank = int64_t(x.shape.size()), dim = a.i("dim");
  MERAK_CHECK(rank >= 1 && dim >= -rank && dim < rank, "dim ", dim, " is out of range for x ",
              shape_str(x.shape));
  return dim < 0 ? dim + rank : dim;
}

// Last-dim sized [D] parameter of layer_norm (weight or bias), when present.
void expect_param(const std::vector<TensorMeta>& in, size_t i, const TensorMeta& x,
                  const char* what) {
  if (i >= in.size() || !in[i].defined) return;
  MERAK_CHECK(in[i].shape == Shape{x.shape.back()} && in[i].dtype == x.dtype, what, " ",
              dtype_name(in[i].dtype), shape_str(in[i].shape), " must be ", dtype_name(x.dtype),
              "[", x.shape.back(), "] for x ", shape_str(x.shape));
}

// logits [..., V] with V >= 1 and targets [...] of an index type.
void expect_logits_targets(const TensorMeta& logits, const TensorMeta& targets) {
  expect_floating(logits, "logits");
  expect_rank_at_least(logits, 1, "logits");
  MERAK_CHECK(logits.shape.back() >= 1, "logits ", shape_str(logits.shape), " has no classes");
  expect_index(targets, "targets");
  MERAK_CHECK(targets.shape == without_last(logits.shape), "targets ", shape_str(targets.shape),
              " must be logits ", shape_str(logits.shape), " without its last dim");
}

Tensor layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& weight,
                       const Tensor& mean, const Tensor& rstd, Tensor* dweight, Tensor* dbias) {
  static const OpDef& op = def("layer_norm_grad");
  auto g = call(op, {dy, x, weight, mean, rstd});
  *dweight = g[1];
  *dbias = g[2];
  return g[0];
}

Tensor cross_entropy_grad(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                          const Tensor& lse, int64_t ignore_index) {
  static const OpDef& op = def("cross_entropy_grad");
  return call1(op, {dloss, logits, targets, lse}, Attrs().set("ignore_index", ignore_index));
}

// ---- softmax / log_softmax along `dim`. Their backwards read only the output y.

OpDef softmax_def(const std::string& name, bool is_log) {
  OpDef d;
  d.name = name;
  d.doc = is_log ? "x - log(sum(exp(x), dim)), computed stably"
                 : "exp(x) / sum(exp(x), dim), computed stably";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"dim", AttrKind::Int, int64_t(-1)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    expect_floating(in[0], "x");
    check_dim(in[0], a);
    return std::vector<TensorMeta>{in[0]};
  };
  d.cost = [is_log](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
                    const Attrs&) {
    const double n = double(in[0].numel());
    // max, subtract, exp (~10 flops), sum, scale; backward: a dot or sum and a multiply-subtract
    // (log_softmax's also takes an exp).
    return OpCost{14 * n, (is_log ? 13 : 4) * n, io_bytes(in, out)};
  };
  // Rows along any other dim are independent; along `dim` every entry needs the others.
  d.sharding.signatures = [](const std::vector<TensorMeta>& in,
                             const std::vector<TensorMeta>& out, const Attrs& a) {
    return alike_splits(in, out.size(), normalize_dim(a.i("dim"), int64_t(in[0].shape.size())));
  };
  d.saves_outputs = 1;
  d.backward = [is_log](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined() || !c.needs_input_grad[0]) return {Tensor()};
    const int64_t dim = c.attrs.i("dim");
    return {is_log ? log_softmax_grad(dy, c.outputs[0], dim) : softmax_grad(dy, c.outputs[0], dim)};
  };
  return d;
}

OpDef softmax_grad_def(const std::string& name, bool is_log) {
  OpDef d;
  d.name = name;
  d.doc = is_log ? "log_softmax backward: dy - exp(y) * sum(dy, dim)"
              : "softmax backward: y * (dy - sum(dy * y, dim))";
  d.inputs = {"dy", "y"};
  d.outputs = {"dx"};
  d.attrs = {{"dim", AttrKind::Int, int64_t(-1)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    expect_floating(in[1], "y");
    expect_same(in[0], "dy", in[1], "y");
    check_dim(in[1], a);
    return std::vector<TensorMeta>{in[1]};
  };
  d.cost = [is_log](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
                 const Attrs&) {
    const double n = double(in[1].numel());
    return OpCost{(is_log ? 13 : 4) * n, 0, io_bytes(in, out)};
  };
  return d;
}

}  // namespace

MERAK_REGISTER_OP(softmax) { return softmax_def("softmax", false); }
MERAK_REGISTER_OP(log_softmax) { return softmax_def("log_softmax", true); }
MERAK_REGISTER_OP(softmax_grad) { return softmax_grad_def("softmax_grad", false); }
MERAK_REGISTER_OP(log_softmax_grad) { return softmax_grad_def("log_softmax_grad", true); }

Tensor softmax(const Tensor& x, int64_t dim) {
  static const OpDef& op = def("softmax");
  return call1(op, {x}, Attrs().set("dim", dim));
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  static const OpDef& op = def("log_softmax");
  return call1(op, {x}, Attrs().set("dim", dim));
}
Tensor softmax_grad(const Tensor& dy, const Tensor& y, int64_t dim) {
  static const OpDef& op = def("softmax_grad");
  return call1(op, {dy, y}, Attrs().set("dim", dim));
}
Tensor log_softmax_grad(const Tensor& dy, const Tensor& y, int64_t dim) {
  static const OpDef& op = def("log_softmax_grad");
  return call1(op, {dy, y}, Attrs().set("dim", dim));
}

// ---- layer_norm over the last dim. Outputs mean and rstd [...] are kept for the backward, which
// is the one fused layer_norm_grad kernel; they are in stat_dtype (f32 for 16-bit x).

MERAK_REGISTER_OP(layer_norm) {
  OpDef d;
  d.name = "layer_norm";
  d.doc = "(x - mean) / sqrt(var + eps) * weight + bias over the last dim; also mean and rstd";
  d.inputs = {"x", "weight?", "bias?"};
  d.outputs = {"y", "mean", "rstd"};
  d.attrs = {{"eps", AttrKind::Float, 1e-5}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const TensorMeta& x = in[0];
    expect_floating(x, "x");
    expect_rank_at_least(x, 1, "x");
    MERAK_CHECK(x.shape.back() >= 1, "x ", shape_str(x.shape), " has an empty last dim");
    expect_param(in, 1, x, "weight");
    expect_param(in, 2, x, "bias");
    MERAK_CHECK(a.f("eps") >= 0, "eps must be >= 0, got ", a.f("eps"));
    const TensorMeta stat{without_last(x.shape), stat_dtype(x.dtype)};
    return std::vector<TensorMeta>{x, stat, stat};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    const double n = double(in[0].numel());
    // sum, squared deviations, normalise, scale and shift; backward about twice that.
    return OpCost{7 * n, 14 * n, io_bytes(in, out)};
  };
  d.saves_inputs = 0b011;   // x, weight
  d.saves_outputs = 0b110;  // mean, rstd
  d.grad_outputs = 1;
  d.backward = [](const BackwardCtx& c) {
    std::vector<Tensor> grads(c.inputs.size());
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined()) return grads;
    const Tensor weight = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
    Tensor dweight, dbias;
    Tensor dx = layer_norm_grad(dy, c.inputs[0], weight, c.outputs[1], c.outputs[2], &dweight,
                                &dbias);
    if (c.needs_input_grad[0]) grads[0] = dx;
    if (grads.size() > 1 && c.inputs[1].defined() && c.needs_input_grad[1]) grads[1] = dweight;
    if (grads.size() > 2 && c.inputs[2].defined() && c.needs_input_grad[2]) grads[2] = dbias;
    return grads;
  };
  return d;
}

MERAK_REGISTER_OP(layer_norm_grad) {
  OpDef d;
  d.name = "layer_norm_grad";
  d.doc = "layer_norm backward: dx, and dweight, dbias summed over all rows";
  d.inputs = {"dy", "x", "weight?", "mean", "rstd"};
  d.outputs = {"dx", "dweight", "dbias"};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    const TensorMeta& x = in[1];
    expect_floating(x, "x");
    expect_rank_at_least(x, 1, "x");
    MERAK_CHECK(x.shape.back() >= 1, "x ", shape_str(x.shape), " has an empty last dim");
    expect_same(in[0], "dy", x, "x");
    expect_param(in, 2, x, "weight");
    const TensorMeta stat{without_last(x.shape), stat_dtype(x.dtype)};
    expect_same(in[3], "mean", stat, "layer_norm's mean of x");
    expect_same(in[4], "rstd", stat, "layer_norm's rstd of x");
    const TensorMeta param{{x.shape.back()}, x.dtype};
    return std::vector<TensorMeta>{x, param, param};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) { return OpCost{14 * double(in[1].numel()), 0, io_bytes(in, out)}; };
  return d;
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  static const OpDef& op = def("layer_norm");
  return call(op, {x, weight, bias}, Attrs().set("eps", eps))[0];
}

// ---- embedding: a row gather; its gradient is a deterministic scatter-add.

MERAK_REGISTER_OP(embedding) {
  OpDef d;
  d.name = "embedding";
  d.doc = "rows of weight [V, D] selected by integer ids [...] -> [..., D]";
  d.inputs = {"weight", "ids"};
  d.outputs = {"y"};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    const TensorMeta &w = in[0], &ids = in[1];
    expect_floating(w, "weight");
    MERAK_CHECK(w.shape.size() == 2, "weight must be [V, D], got ", shape_str(w.shape));
    expect_index(ids, "ids");
    Shape out = ids.shape;
    out.push_back(w.shape[1]);
    return std::vector<TensorMeta>{{out, w.dtype}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    // A copy: no arithmetic forward; the backward adds every output element once. Bytes count
    // the gathered rows, not the whole table.
    const double n = double(out[0].numel());
    return OpCost{0, n, double(in[1].nbytes()) + 2 * double(out[0].nbytes())};
  };
  // Vocabulary-parallel: each rank looks up the ids among its rows (tp_embedding; zeros for the
  // others), so the ranks' results sum to the output.
  d.sharding.signatures = [](const std::vector<TensorMeta>&, const std::vector<TensorMeta>&,
                             const Attrs&) {
    SbpSignature vocab{{Sbp::split(0), Sbp::broadcast()}, {Sbp::partial_sum()}};
    vocab.weight = 0;
    vocab.local_op = "tp_embedding";
    return std::vector<SbpSignature>{vocab};
  };
  d.saves_inputs = 0b10;  // ids; weight's shape alone gives V
  d.separable_grads = true;  // only the weight has a gradient
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined() || !c.needs_input_grad[0]) return {Tensor(), Tensor()};
    return {embedding_grad(dy, c.inputs[1], c.inputs[0].size(0)), Tensor()};
  };
  return d;
}

MERAK_REGISTER_OP(embedding_grad) {
  OpDef d;
  d.name = "embedding_grad";
  d.doc = "embedding backward: dy [..., D] rows summed into [num_embeddings, D] at ids";
  d.inputs = {"dy", "ids"};
  d.outputs = {"dweight"};
  d.attrs = {{"num_embeddings", AttrKind::Int, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const TensorMeta &dy = in[0], &ids = in[1];
    expect_floating(dy, "dy");
    expect_index(ids, "ids");
    MERAK_CHECK(dy.shape.size() == ids.shape.size() + 1 &&
                    without_last(dy.shape) == ids.shape,
                "dy ", shape_str(dy.shape), " must be ids ", shape_str(ids.shape), " + [D]");
    const int64_t V = a.i("num_embeddings");
    MERAK_CHECK(V >= 0, "num_embeddings must be >= 0, got ", V);
    return std::vector<TensorMeta>{{{V, dy.shape.back()}, dy.dtype}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) { return OpCost{double(in[0].numel()), 0, io_bytes(in, out)}; };
  return d;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  static const OpDef& op = def("embedding");
  return call1(op, {weight, ids});
}
Tensor embedding_grad(const Tensor& dy, const Tensor& ids, int64_t num_embeddings) {
  static const OpDef& op = def("embedding_grad");
  return call1(op, {dy, ids}, Attrs().set("num_embeddings", num_embeddings));
}

// ---- cross_entropy, fused: the forward keeps only each row's log-sum-exp (aux output lse),
// never a log-softmax tensor; the backward rebuilds softmax from it. loss and lse are in
// stat_dtype (f32 for 16-bit logits, so a scaled loss cannot overflow f16).

MERAK_REGISTER_OP(cross_entropy) {
  OpDef d;
  d.name = "cross_entropy";
  d.doc = "mean over non-ignored rows of logsumexp(logits) - logits[target]; also lse per row";
  d.inputs = {"logits", "targets"};
  d.outputs = {"loss", "lse"};
  d.attrs = {{"ignore_index", AttrKind::Int, int64_t(-100)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    expect_logits_targets(in[0], in[1]);
    const DType stat = stat_dtype(in[0].dtype);
    return std::vector<TensorMeta>{{{}, stat}, {in[1].shape, stat}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    const double n = double(in[0].numel());
    // max, subtract, exp (~10 flops), sum; backward: exp, scale, subtract.
    return OpCost{13 * n, 13 * n, io_bytes(in, out)};
  };
  // Logits split over the classes: tp_cross_entropy combines the ranks' parts over the group
  // itself, so every rank ends with the whole loss and lse.
  d.sharding.signatures = [](const std::vector<TensorMeta>&, const std::vector<TensorMeta>&,
                             const Attrs&) {
    SbpSignature classes{{Sbp::split(-1), Sbp::broadcast()}, {Sbp::broadcast(), Sbp::broadcast()}};
    classes.local_op = "tp_cross_entropy";
    return std::vector<SbpSignature>{classes};
  };
  d.saves_inputs = 0b11;   // logits, targets
  d.saves_outputs = 0b10;  // lse
  d.grad_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dloss = c.grad_outputs[0];
    if (!dloss.defined() || !c.needs_input_grad[0]) return {Tensor(), Tensor()};
    return {cross_entropy_grad(dloss, c.inputs[0], c.inputs[1], c.outputs[1],
                               c.attrs.i("ignore_index")),
            Tensor()};
  };
  return d;
}

MERAK_REGISTER_OP(cross_entropy_grad) {
  OpDef d;
  d.name = "cross_entropy_grad";
  d.doc = "cross_entropy backward: (softmax(logits) - onehot(targets)) * dloss / count";
  d.inputs = {"dloss", "logits", "targets", "lse"};
  d.outputs = {"dlogits"};
  d.attrs = {{"ignore_index", AttrKind::Int, int64_t(-100)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    const TensorMeta &dloss = in[0], &logits = in[1], &targets = in[2], &lse = in[3];
    expect_logits_targets(logits, targets);
    // dloss is the loss's gradient and lse the forward's, both in the forward's stat dtype;
    // dlogits is in the logits' own.
    const DType stat = stat_dtype(logits.dtype);
    MERAK_CHECK(dloss.numel() == 1 && dloss.dtype == stat, "dloss ", dtype_name(dloss.dtype),
                shape_str(dloss.shape), " must be a ", dtype_name(stat),
                " scalar (the loss's dtype for ", dtype_name(logits.dtype), " logits)");
    expect_same(lse, "lse", {targets.shape, stat}, "cross_entropy's lse");
    return std::vector<TensorMeta>{logits};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) { return OpCost{13 * double(in[1].numel()), 0, io_bytes(in, out)}; };
  return d;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  static const OpDef& op = def("cross_entropy");
  return call(op, {logits, targets}, Attrs().set("ignore_index", ignore_index))[0];
}

// ---- dropout: the mask is Philox(key, element index, stream), so the backward re-derives it
// (dropout of dy with the same attributes) and nothing is saved. A tensor-parallel rank's piece
// draws by its elements' indices in the unsplit tensor (split_* attributes, set by the sharding
// rule's localize), and a micro-batch by their indices in the global batch's (first_row and
// rows, set by the graph executor from rng_place), so every layout draws the same masks.

MERAK_REGISTER_OP(dropout) {
  OpDef d;
  d.name = "dropout";
  d.doc = "x / (1 - p) where philox_uniform(key, element index in the global batch's unsplit "
          "tensor, stream) >= p, else 0";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {{"p", AttrKind::Float, std::nullopt},
             {"key", AttrKind::Int, std::nullopt},
             {"stream", AttrKind::Int, int64_t(0)},
             {"first_row", AttrKind::Int, int64_t(0)},
             {"rows", AttrKind::Int, int64_t(0)},
             {"split_dim", AttrKind::Int, int64_t(-1)},
             {"split_size", AttrKind::Int, int64_t(0)},
             {"split_start", AttrKind::Int, int64_t(0)},
             {"split_runs", AttrKind::Int, int64_t(1)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    expect_floating(in[0], "x");
    const double p = a.f("p");
    MERAK_CHECK(p >= 0 && p < 1, "p must be in [0, 1), got ", p);
    dropout_piece(a, in[0].shape);  // throws when the piece does not fit x
    return std::vector<TensorMeta>{in[0]};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    // One Philox4x32-10 block per element (~40 integer ops) dominates; backward is the same.
    const double n = double(in[0].numel());
    return OpCost{40 * n, 40 * n, io_bytes(in, out)};
  };
  d.sharding = elementwise_sharding();
  // A piece of a piece (a split of a dim already split) is not a case any pass makes.
  d.sharding.localize = [](const Attrs& a, const LocalDim& piece) {
    MERAK_CHECK(a.i("split_dim") < 0, "dropout's input is split twice (dims ", a.i("split_dim"),
                " and ", piece.dim, ")");
    return Attrs(a)
        .set("split_dim", piece.dim)
        .set("split_size", piece.size)
        .set("split_start", piece.start)
        .set("split_runs", piece.ranges);
  };
  d.random = {"p", /*identity_at_zero=*/true};
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined() || !c.needs_input_grad[0]) return {Tensor()};
    static const OpDef& op = def("dropout");
    return {call1(op, {dy}, c.attrs)};
  };
  return d;
}

Tensor dropout(const Tensor& x, double p, uint64_t key, uint64_t stream) {
  static const OpDef& op = def("dropout");
  return call1(op, {x},
               Attrs().set("p", p).set("key", int64_t(key)).set("stream", int64_t(stream)));
}

}  // namespace merak::ops
