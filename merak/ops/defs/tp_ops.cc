// Tensor-parallel ops: the collectives Megatron-style sharding needs where partial results meet
// (tp_all_reduce, tp_copy, tp_all_gather), and the vocabulary-parallel embedding and loss. The
// partitioner's tensor-parallel pass inserts them; their kernels reduce through the collectives
// of the caller's ops::TpScope (merak/ops/collectives.h), so the same graph runs under the
// runtime's communicator or in one process.
#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"

namespace merak::ops {
namespace {

std::vector<AttrSpec> group_attrs() {
  return {{"group", AttrKind::String, std::nullopt}, {"size", AttrKind::Int, int64_t(1)}};
}

void check_size(const Attrs& a) {
  MERAK_CHECK(a.i("size") >= 1, "group size must be >= 1, got ", a.i("size"));
}

void expect_index_dtype(const TensorMeta& m, const char* what) {
  MERAK_CHECK(m.dtype == DType::I32 || m.dtype == DType::I64, what, " must be i32 or i64, got ",
              dtype_name(m.dtype));
}

Tensor tp_cross_entropy_grad(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                             const Tensor& lse, int64_t start, int64_t ignore_index) {
  static const OpDef& op = def("tp_cross_entropy_grad");
  return call1(op, {dloss, logits, targets, lse},
               Attrs().set("start", start).set("ignore_index", ignore_index));
}

}  // namespace

// --- tp_all_reduce: y = sum over the group of x; dx = dy ---
MERAK_REGISTER_OP(tp_all_reduce) {
  OpDef d;
  d.name = "tp_all_reduce";
  d.doc = "x summed over the tensor-parallel group (row-parallel outputs); gradient passes through";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = group_attrs();
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    expect_floating(in[0], "x");
    check_size(a);
    return std::vector<TensorMeta>{in[0]};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&,
              const Attrs& a) {
    OpCost c{double(in[0].numel()), 0, 2 * double(in[0].nbytes())};
    c.collectives = {{Collective::Kind::AllReduce, false, a.i("size"), double(in[0].numel())}};
    return c;
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> { return {c.grad_outputs[0]}; };
  return d;
}

// --- tp_copy: y = x; dx = sum over the group of dy ---
MERAK_REGISTER_OP(tp_copy) {
  OpDef d;
  d.name = "tp_copy";
  d.doc = "x itself (a view) before column-parallel ops; its gradient is summed over the group";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = group_attrs();
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    expect_floating(in[0], "x");
    check_size(a);
    return std::vector<TensorMeta>{in[0]};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&,
              const Attrs& a) {
    OpCost c{0, 0, 0};
    c.collectives = {{Collective::Kind::AllReduce, true, a.i("size"), double(in[0].numel())}};
    return c;
  };
  d.view = [](const std::vector<Tensor>& in, const Attrs&) -> std::vector<Tensor> {
    return {in[0].detach()};
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    return {tp_all_reduce(g, c.attrs.s("group"), c.attrs.i("size"))};
  };
  return d;
}

// --- tp_all_gather: the members' parts concatenated along dim; dx = this member's slice ---
MERAK_REGISTER_OP(tp_all_gather) {
  OpDef d;
  d.name = "tp_all_gather";
  d.doc = "members' parts of x concatenated along dim (sizes: each part's length, index: ours)";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = group_attrs();
  d.attrs.push_back({"index", AttrKind::Int, int64_t(0)});
  d.attrs.push_back({"sizes", AttrKind::Ints, std::nullopt});
  d.attrs.push_back({"dim", AttrKind::Int, int64_t(-1)});
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    expect_floating(in[0], "x");
    check_size(a);
    const std::vector<int64_t>& sizes = a.ints("sizes");
    const int64_t index = a.i("index");
    MERAK_CHECK(int64_t(sizes.size()) == a.i("size"), "sizes has ", sizes.size(),
                " entries for a group of ", a.i("size"));
    MERAK_CHECK(index >= 0 && index < a.i("size"), "index ", index, " is outside the group of ",
                a.i("size"));
    Shape s = in[0].shape;
    const size_t dim = size_t(normalize_dim(a.i("dim"), int64_t(s.size())));
    MERAK_CHECK(s[dim] == sizes[size_t(index)], "x ", shape_str(s), " has ", s[dim],
                " along dim ", dim, " but sizes[", index, "] is ", sizes[size_t(index)]);
    int64_t total = 0;
    for (int64_t n : sizes) {
      MERAK_CHECK(n >= 0, "negative size ", n, " in sizes");
      total += n;
    }
    s[dim] = total;
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs& a) {
    OpCost c{0, 0, double(in[0].nbytes() + out[0].nbytes())};
    c.collectives = {{Collective::Kind::AllGather, false, a.i("size"), double(out[0].numel())}};
    return c;
  };
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& g = c.grad_outputs[0];
    if (!g.defined()) return {Tensor()};
    const std::vector<int64_t>& sizes = c.attrs.ints("sizes");
    int64_t start = 0;
    for (int64_t i = 0; i < c.attrs.i("index"); ++i) start += sizes[size_t(i)];
    return {contiguous(
        slice(g, c.attrs.i("dim"), start, start + sizes[size_t(c.attrs.i("index"))]))};
  };
  return d;
}

// --- tp_embedding: rows of this member's part of the table; ids outside it give zeros ---
MERAK_REGISTER_OP(tp_embedding) {
  OpDef d;
  d.name = "tp_embedding";
  d.doc = "weight[ids - start] where start <= ids < start + V_local, else zeros: [..., D]";
  d.inputs = {"weight", "ids"};
  d.outputs = {"y"};
  d.attrs = {{"start", AttrKind::Int, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const TensorMeta &w = in[0], &ids = in[1];
    expect_floating(w, "weight");
    MERAK_CHECK(w.shape.size() == 2, "weight must be [V_local, D], got ", shape_str(w.shape));
    expect_index_dtype(ids, "ids");
    MERAK_CHECK(a.i("start") >= 0, "start must be >= 0, got ", a.i("start"));
    Shape out = ids.shape;
    out.push_back(w.shape[1]);
    return std::vector<TensorMeta>{{out, w.dtype}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    const double n = double(out[0].numel());
    return OpCost{0, n, double(in[1].nbytes()) + 2 * double(out[0].nbytes())};
  };
  d.saves_inputs = 0b10;  // ids
  d.separable_grads = true;  // only the weight has a gradient
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined() || !c.needs_input_grad[0]) return {Tensor(), Tensor()};
    return {tp_embedding_grad(dy, c.inputs[1], c.attrs.i("start"), c.inputs[0].size(0)),
            Tensor()};
  };
  return d;
}

MERAK_REGISTER_OP(tp_embedding_grad) {
  OpDef d;
  d.name = "tp_embedding_grad";
  d.doc = "tp_embedding backward: rows of dy summed into [num_embeddings, D] at ids - start";
  d.inputs = {"dy", "ids"};
  d.outputs = {"dweight"};
  d.attrs = {{"start", AttrKind::Int, std::nullopt},
             {"num_embeddings", AttrKind::Int, std::nullopt}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const TensorMeta &dy = in[0], &ids = in[1];
    expect_floating(dy, "dy");
    expect_index_dtype(ids, "ids");
    MERAK_CHECK(dy.shape.size() == ids.shape.size() + 1 &&
                    Shape(dy.shape.begin(), dy.shape.end() - 1) == ids.shape,
                "dy ", shape_str(dy.shape), " must be ids ", shape_str(ids.shape), " + [D]");
    MERAK_CHECK(a.i("num_embeddings") >= 0 && a.i("start") >= 0,
                "start and num_embeddings must be >= 0");
    return std::vector<TensorMeta>{{{a.i("num_embeddings"), dy.shape.back()}, dy.dtype}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    return OpCost{double(in[0].numel()), 0,
                  double(in[0].nbytes() + in[1].nbytes() + out[0].nbytes())};
  };
  return d;
}

// --- tp_cross_entropy: the loss of logits split over the vocabulary ---
MERAK_REGISTER_OP(tp_cross_entropy) {
  OpDef d;
  d.name = "tp_cross_entropy";
  d.doc = "cross_entropy of vocabulary-parallel logits [..., V_local] (classes start..): "
          "loss and lse reduced over the group";
  d.inputs = {"logits", "targets"};
  d.outputs = {"loss", "lse"};
  d.attrs = group_attrs();
  d.attrs.push_back({"start", AttrKind::Int, std::nullopt});
  d.attrs.push_back({"ignore_index", AttrKind::Int, int64_t(-100)});
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    const TensorMeta &logits = in[0], &targets = in[1];
    expect_floating(logits, "logits");
    expect_rank_at_least(logits, 1, "logits");
    MERAK_CHECK(logits.shape.back() >= 1, "logits ", shape_str(logits.shape), " has no classes");
    expect_index_dtype(targets, "targets");
    MERAK_CHECK(targets.shape == Shape(logits.shape.begin(), logits.shape.end() - 1), "targets ",
                shape_str(targets.shape), " must be logits ", shape_str(logits.shape),
                " without its last dim");
    MERAK_CHECK(a.i("start") >= 0, "start must be >= 0, got ", a.i("start"));
    check_size(a);
    // As cross_entropy: loss and lse in f32 for 16-bit logits.
    const DType stat = stat_dtype(logits.dtype);
    return std::vector<TensorMeta>{{{}, stat}, {targets.shape, stat}};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs& a) {
    const double n = double(in[0].numel());
    OpCost c{13 * n, 13 * n,
             double(in[0].nbytes() + in[1].nbytes() + out[0].nbytes() + out[1].nbytes())};
    // Three row-sized reductions of f32 statistics: the max, the sum of exponentials, the
    // target logit.
    c.collectives = {{Collective::Kind::AllReduce, false, a.i("size"), double(out[1].numel()), 3,
                      true}};
    return c;
  };
  d.saves_inputs = 0b11;   // logits, targets
  d.saves_outputs = 0b10;  // lse
  d.grad_outputs = 1;
  d.backward = [](const BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dloss = c.grad_outputs[0];
    if (!dloss.defined() || !c.needs_input_grad[0]) return {Tensor(), Tensor()};
    return {tp_cross_entropy_grad(dloss, c.inputs[0], c.inputs[1], c.outputs[1],
                                  c.attrs.i("start"), c.attrs.i("ignore_index")),
            Tensor()};
  };
  return d;
}

MERAK_REGISTER_OP(tp_cross_entropy_grad) {
  OpDef d;
  d.name = "tp_cross_entropy_grad";
  d.doc = "tp_cross_entropy backward: (exp(logits - lse) - onehot(targets - start)) * dloss / "
          "count on this member's classes";
  d.inputs = {"dloss", "logits", "targets", "lse"};
  d.outputs = {"dlogits"};
  d.attrs = {{"start", AttrKind::Int, std::nullopt},
             {"ignore_index", AttrKind::Int, int64_t(-100)}};
  d.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    const TensorMeta &dloss = in[0], &logits = in[1], &targets = in[2], &lse = in[3];
    expect_floating(logits, "logits");
    expect_index_dtype(targets, "targets");
    const Shape rows(logits.shape.begin(), logits.shape.end() - 1);
    const DType stat = stat_dtype(logits.dtype);
    MERAK_CHECK(targets.shape == rows && lse.shape == rows, "targets ",
                shape_str(targets.shape), " and lse ", shape_str(lse.shape), " must be logits ",
                shape_str(logits.shape), " without its last dim");
    MERAK_CHECK(lse.dtype == stat, "lse must be ", dtype_name(stat), " for ",
                dtype_name(logits.dtype), " logits, got ", dtype_name(lse.dtype));
    MERAK_CHECK(dloss.numel() == 1 && dloss.dtype == stat, "dloss must be a ", dtype_name(stat),
                " scalar");
    return std::vector<TensorMeta>{logits};
  };
  d.cost = [](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out,
              const Attrs&) {
    return OpCost{13 * double(in[1].numel()), 0,
                  double(in[1].nbytes() + in[2].nbytes() + in[3].nbytes() + out[0].nbytes())};
  };
  return d;
}

Tensor tp_all_reduce(const Tensor& x, const std::string& group, int64_t size) {
  static const OpDef& op = def("tp_all_reduce");
  return call1(op, {x}, Attrs().set("group", group).set("size", size));
}

Tensor tp_copy(const Tensor& x, const std::string& group, int64_t size) {
  static const OpDef& op = def("tp_copy");
  return call1(op, {x}, Attrs().set("group", group).set("size", size));
}

Tensor tp_all_gather(const Tensor& x, const std::string& group, int64_t size, int64_t index,
                     const std::vector<int64_t>& sizes, int64_t dim) {
  static const OpDef& op = def("tp_all_gather");
  return call1(op, {x},
               Attrs().set("group", group).set("size", size).set("index", index)
                   .set("sizes", sizes).set("dim", dim));
}

Tensor tp_embedding(const Tensor& weight, const Tensor& ids, int64_t start) {
  static const OpDef& op = def("tp_embedding");
  return call1(op, {weight, ids}, Attrs().set("start", start));
}

Tensor tp_embedding_grad(const Tensor& dy, const Tensor& ids, int64_t start,
                         int64_t num_embeddings) {
  static const OpDef& op = def("tp_embedding_grad");
  return call1(op, {dy, ids}, Attrs().set("start", start).set("num_embeddings", num_embeddings));
}

Tensor tp_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t start,
                        const std::string& group, int64_t size, int64_t ignore_index) {
  static const OpDef& op = def("tp_cross_entropy");
  return call(op, {logits, targets},
              Attrs().set("start", start).set("group", group).set("size", size)
                  .set("ignore_index", ignore_index))[0];
}

}  // namespace merak::ops
