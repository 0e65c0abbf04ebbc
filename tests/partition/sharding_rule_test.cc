// The tensor-parallel pass learns what it can split from the op registry alone: an op defined
// only here, with column- and row-parallel signatures in its entry, is split like a linear (and
// the split ranks still compute the unsplit loss and gradients); the same op without the rule
// stays whole.
#include <catch2/catch.hpp>

#include "merak/graph/tracer.h"
#include "merak/nn/layers.h"
#include "merak/ops/functional.h"
#include "merak/ops/op_util.h"
#include "merak/partition/partitioner.h"
#include "merak/partition/tensor_parallel.h"
#include "tests/partition/helpers.h"

using namespace merak;
using namespace merak::partition;

namespace {

// scale * (x [..., in] @ weight [out, in]^T): a linear the pass has never heard of.
ops::OpDef scaled_linear_def(const char* name) {
  ops::OpDef d;
  d.name = name;
  d.doc = "scale * x @ weight^T";
  d.inputs = {"x", "weight"};
  d.outputs = {"y"};
  d.attrs = {{"scale", ops::AttrKind::Float, 1.0}};
  d.infer = [](const std::vector<ops::TensorMeta>& in, const ops::Attrs&) {
    Shape y = in[0].shape;
    y.back() = in[1].shape[0];
    return std::vector<ops::TensorMeta>{{y, in[0].dtype}};
  };
  d.saves_inputs = 0b11;
  d.backward = [](const ops::BackwardCtx& c) -> std::vector<Tensor> {
    const Tensor& dy = c.grad_outputs[0];
    if (!dy.defined()) return {Tensor(), Tensor()};
    const Tensor &x = c.inputs[0], &w = c.inputs[1];
    const double scale = c.attrs.f("scale");
    const Tensor dy2 = ops::reshape(dy, {-1, w.size(0)});
    const Tensor x2 = ops::reshape(x, {-1, w.size(1)});
    return {ops::reshape(ops::mul_scalar(ops::matmul(dy2, w), scale), x.shape()),
            ops::mul_scalar(ops::matmul(dy2, x2, true, false), scale)};
  };
  return d;
}

// Each rank computes some output features (weight split by rows), or a partial sum over some
// input features (weight split by columns).
ops::ShardingRule column_or_row() {
  ops::ShardingRule rule;
  rule.signatures = [](const auto&, const auto&, const ops::Attrs&) {
    ops::SbpSignature column{{ops::Sbp::broadcast(), ops::Sbp::split(0)}, {ops::Sbp::split(-1)}};
    ops::SbpSignature row{{ops::Sbp::split(-1), ops::Sbp::split(1)}, {ops::Sbp::partial_sum()}};
    column.weight = row.weight = 1;
    return std::vector<ops::SbpSignature>{column, row};
  };
  return rule;
}

void scaled_linear_kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out,
                          const ops::Attrs& a) {
  const Tensor &x = in[0], &w = in[1];
  const int64_t n_out = w.size(0), n_in = w.size(1), rows = x.numel() / n_in;
  const float scale = float(a.f("scale"));
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* yp = out[0].data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n_out; ++o) {
      float acc = 0;
      for (int64_t i = 0; i < n_in; ++i) acc += xp[r * n_in + i] * wp[o * n_in + i];
      yp[r * n_out + o] = scale * acc;
    }
}

MERAK_REGISTER_OP(scaled_linear) {
  ops::OpDef d = scaled_linear_def("scaled_linear");
  d.sharding = column_or_row();
  return d;
}
MERAK_REGISTER_OP(scaled_linear_unsharded) { return scaled_linear_def("scaled_linear_unsharded"); }
MERAK_REGISTER_KERNEL(scaled_linear, CPU, scaled_linear_kernel);
MERAK_REGISTER_KERNEL(scaled_linear_unsharded, CPU, scaled_linear_kernel);

class TwoWeights : public nn::Module {
 public:
  nn::Linear& a = add<nn::Linear>("a", 8, 16, false);
  nn::Linear& b = add<nn::Linear>("b", 16, 8, false);
};

// loss = mean(op(relu(op(x, a.weight)), b.weight)): an MLP written with `op`.
graph::Model mlp_of(TwoWeights& module, const std::string& op) {
  const graph::TraceFn fn = [&](const std::vector<Tensor>& x) {
    const ops::Attrs half = ops::Attrs().set("scale", 0.5);
    const Tensor h = ops::relu(ops::call(op, {x[0], module.a.weight}, half)[0]);
    const Tensor y = ops::call(op, {h, module.b.weight}, half)[0];
    return std::vector<Tensor>{ops::mean(y, {0, 1})};
  };
  return graph::trace(module, 3, {{"x", {4, 8}, DType::F32}}, fn, {"loss"});
}

const graph::Node* find_op(const graph::Graph& g, const std::string& op) {
  for (const graph::Node& n : g.nodes())
    if (n.op() == op) return &n;
  return nullptr;
}

}  // namespace

TEST_CASE("an op registered with a sharding rule is split by the unchanged pass", "[partition]") {
  TwoWeights module;
  const graph::Model m = mlp_of(module, "scaled_linear");
  const TpPass pass = shard_tensor_parallel(m, 2);
  REQUIRE(pass.ranks.size() == 2);
  CHECK(pass.notes[0] == "1 regions split (0 attention over heads, 1 MLP): 1 column-parallel and "
                         "1 row-parallel linears");
  for (int64_t r = 0; r < 2; ++r) {
    // a's 16 output features and b's 16 input features, 8 of each on a rank.
    const auto& shards = pass.ranks[size_t(r)].shards;
    const ShardSpec& a = shards.at("a.weight");
    CHECK(a.split == "column");
    CHECK(a.boxes[0].offsets == Shape{r * 8, 0});
    CHECK(a.boxes[0].sizes == Shape{8, 8});
    const ShardSpec& b = shards.at("b.weight");
    CHECK(b.split == "row");
    CHECK(b.boxes[0].offsets == Shape{0, r * 8});
    CHECK(b.boxes[0].sizes == Shape{8, 8});
    // The collectives a column- and row-parallel pair needs, around the new op.
    const graph::Graph& g = pass.ranks[size_t(r)].model.graph();
    CHECK(find_op(g, "tp_copy"));
    CHECK(find_op(g, "tp_all_reduce"));
  }

  // The split ranks, simulated in threads, compute the unsplit loss and gradients.
  Request req;
  req.tp = 2;
  req.hardware = test::profile("cpu-local");
  req.memory.micro_batches = 1;
  const std::map<std::string, Tensor> batch = {
      {"x", Tensor::from_vector(std::vector<float>{0.5f, -1.f, 2.f, 0.25f, 1.5f, -0.75f, 1.f, 3.f,
                                                   -2.f, 0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f, 1.f,
                                                   1.f, 1.f, -1.f, 2.f, 0.f, 0.5f, -0.5f, 2.5f,
                                                   0.7f, -0.3f, 1.1f, 0.9f, -1.2f, 0.4f, 0.8f, 0.f},
                                {4, 8})}};
  test::check_same_step(run_step(run_partition(m, req).plan, batch, 5),
                        test::unsplit_step(m, batch, 5));
}

TEST_CASE("the same op without a sharding rule stays whole", "[partition]") {
  TwoWeights module;
  const TpPass pass = shard_tensor_parallel(mlp_of(module, "scaled_linear_unsharded"), 2);
  CHECK(pass.notes[0] == "0 regions split (0 attention over heads, 0 MLP): 0 column-parallel and "
                         "0 row-parallel linears");
  CHECK(pass.ranks[0].shards.at("a.weight").split == "replicated");
  CHECK(pass.ranks[0].shards.at("b.weight").split == "replicated");
  CHECK_FALSE(find_op(pass.ranks[0].model.graph(), "tp_all_reduce"));
}

// The cost model likewise prices a tensor-parallel op's exchanges from its registry entry: an
// op defined only here, which says it all-gathers its result twice in forward and all-reduces
// its gradient in backward, is costed so with no change to the cost model.
namespace {

MERAK_REGISTER_OP(test_exchanging_scale) {
  ops::OpDef d;
  d.name = "test_exchanging_scale";
  d.doc = "2 x (a test op whose cost states collectives)";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.infer = [](const std::vector<ops::TensorMeta>& in, const ops::Attrs&) {
    return std::vector<ops::TensorMeta>{in[0]};
  };
  d.cost = [](const std::vector<ops::TensorMeta>& in, const std::vector<ops::TensorMeta>&,
              const ops::Attrs&) {
    ops::OpCost c{double(in[0].numel()), double(in[0].numel()), 2 * double(in[0].nbytes())};
    const double n = double(in[0].numel());
    c.collectives = {{ops::Collective::Kind::AllGather, false, 4, n, 2},
                     {ops::Collective::Kind::AllReduce, true, 4, n}};
    return c;
  };
  d.backward = [](const ops::BackwardCtx& c) -> std::vector<Tensor> {
    return {ops::mul_scalar(c.grad_outputs[0], 2.0)};
  };
  return d;
}

}  // namespace

TEST_CASE("a new op's collectives in its registry entry are costed by the unchanged model",
          "[partition]") {
  TwoWeights module;
  const graph::TraceFn fn = [&](const std::vector<Tensor>& x) {
    const Tensor h = ops::call("test_exchanging_scale", {ops::linear(x[0], module.a.weight)})[0];
    return std::vector<Tensor>{ops::mean(h, {0, 1})};
  };
  const graph::Model m = graph::trace(module, 3, {{"x", {4, 8}, DType::F32}}, fn, {"loss"});
  const GraphFacts f = analyze(m.graph());
  int node = -1;
  for (size_t k = 0; k < f.nodes.size(); ++k)
    if (f.nodes[k].op->name == "test_exchanging_scale") node = int(k);
  REQUIRE(node >= 0);
  const double bytes = 4 * 16 * 4;  // its [4, 16] f32 result
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const CostModel cost(test::profile("a100-80g"), p, {1, 1, 4});
    const double scale = p == Precision::F32 ? 1.0 : 0.5;
    const NodeTime t = cost.node_time(f, node);
    CHECK(t.fwd_comm == Approx(2 * cost.all_gather_seconds(bytes * scale, 4, cost.tp_link())));
    CHECK(t.bwd_comm == Approx(cost.all_reduce_seconds(bytes * scale, 4, cost.tp_link())));
    CHECK(t.fwd_comm > 0);
    CHECK(t.fwd >= t.fwd_comm);
    CHECK(t.bwd >= t.bwd_comm);
  }
}
