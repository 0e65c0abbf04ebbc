// Shards are drawn at their place in the full tensor: any split of a parameter, reassembled,
// is the parameter one process draws; stage models carry the local values; the time breakdown.
#include <catch2/catch.hpp>

#include "merak/core/philox.h"
#include "merak/graph/convert.h"
#include "merak/nn/module.h"
#include "merak/ops/functional.h"
#include "merak/runtime/engine_params.h"
#include "merak/runtime/engine_trace.h"

using namespace merak;
using merak::runtime::materialize_shard;

namespace {

partition::ParamShard shard(const std::string& name, const Shape& full, int64_t concat_dim,
                            const std::vector<std::pair<Shape, Shape>>& boxes) {
  partition::ParamShard s;
  s.set_name(name);
  for (int64_t d : full) s.add_full_shape(d);
  s.set_concat_dim(concat_dim);
  for (const auto& [offsets, sizes] : boxes) {
    partition::Box& b = *s.add_boxes();
    for (int64_t o : offsets) b.add_offsets(o);
    for (int64_t n : sizes) b.add_sizes(n);
  }
  s.set_dtype(graph::to_proto(DType::F32));
  s.mutable_init()->set_kind(graph::InitSpec::NORMAL);
  s.mutable_init()->set_std(0.02);
  s.set_trainable(true);
  return s;
}

// The parameter as one process draws it (nn::Module::materialize's path).
Tensor whole(const std::string& name, const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  nn::initialize(t, name, nn::Init::normal(0.02), seed);
  return t;
}

void check_equal(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("element " << i);
    REQUIRE(x[i] == y[i]);
  }
}

}  // namespace

TEST_CASE("a whole shard is the parameter one process draws", "[engine]") {
  const Tensor got = materialize_shard(shard("h.0.w", {6, 4}, 0, {{{0, 0}, {6, 4}}}), 7);
  check_equal(got, whole("h.0.w", {6, 4}, 7));
  // Another seed or name gives other values.
  CHECK(materialize_shard(shard("h.0.w", {6, 4}, 0, {{{0, 0}, {6, 4}}}), 8).to_vector<float>() !=
        got.to_vector<float>());
}

TEST_CASE("row and column shards reassemble the full parameter", "[engine]") {
  const Tensor full = whole("fc.weight", {8, 6}, 3);
  // Column-parallel (rows of a [out, in] weight) over 2 ranks.
  const Tensor r0 = materialize_shard(shard("fc.weight", {8, 6}, 0, {{{0, 0}, {4, 6}}}), 3);
  const Tensor r1 = materialize_shard(shard("fc.weight", {8, 6}, 0, {{{4, 0}, {4, 6}}}), 3);
  check_equal(ops::concat({r0, r1}, 0), full);
  // Row-parallel (columns) over 3 ranks.
  std::vector<Tensor> cols;
  for (int64_t t = 0; t < 3; ++t)
    cols.push_back(materialize_shard(shard("fc.weight", {8, 6}, 1, {{{0, 2 * t}, {8, 2}}}), 3));
  check_equal(ops::concat(cols, 1), full);
}

TEST_CASE("a fused weight's per-part boxes concatenate along concat_dim", "[engine]") {
  // A QKV weight [3 * 4, 2]: tp rank 1 of 2 holds rows 2..3 of each of q, k and v.
  const Tensor full = whole("attn.qkv.weight", {12, 2}, 5);
  const Tensor got = materialize_shard(
      shard("attn.qkv.weight", {12, 2}, 0, {{{2, 0}, {2, 2}}, {{6, 0}, {2, 2}}, {{10, 0}, {2, 2}}}),
      5);
  check_equal(got, ops::concat({full.narrow(0, 2, 2), full.narrow(0, 6, 2), full.narrow(0, 10, 2)},
                               0));
}

TEST_CASE("shards of a parameter with values slice them", "[engine]") {
  const Tensor full = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor got = materialize_shard(shard("p", {2, 3}, 1, {{{0, 1}, {2, 2}}}), 1, full);
  CHECK(got.to_vector<float>() == std::vector<float>{2, 3, 5, 6});
}

TEST_CASE("a box outside the full tensor is an error naming the parameter", "[engine]") {
  try {
    materialize_shard(shard("emb.w", {4, 2}, 0, {{{3, 0}, {2, 2}}}), 1);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("parameter 'emb.w'") != std::string::npos);
    CHECK(std::string(e.what()).find("outside") != std::string::npos);
  }
}

TEST_CASE("a stage model carries its shards' values and checks their shapes", "[engine]") {
  partition::RankProgram prog;
  prog.set_rank(1);
  graph::Initializer& init = *prog.mutable_graph()->add_initializers();
  init.set_name("fc.weight");
  *init.mutable_type() = graph::tensor_type({4, 6}, DType::F32);
  init.set_trainable(true);
  *prog.add_params() = shard("fc.weight", {8, 6}, 0, {{{4, 0}, {4, 6}}});
  const graph::Model m = runtime::stage_model(prog, 3);
  const Tensor got = graph::tensor_from_bytes(m.graph().initializers(0).data(), {4, 6},
                                              DType::F32, "w");
  check_equal(got, whole("fc.weight", {8, 6}, 3).narrow(0, 4, 4).contiguous());

  *prog.mutable_graph()->mutable_initializers(0)->mutable_type() =
      graph::tensor_type({8, 6}, DType::F32);
  try {
    runtime::stage_model(prog, 3);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("rank 1: parameter 'fc.weight': its boxes make [4, 6] "
                                           "but the stage graph holds it as [8, 6]"));
  }
}

TEST_CASE("a stage model keeps the values the plan gives its piece", "[engine]") {
  // An imported network's weights travel in the plan, already sliced to the rank's piece by the
  // tensor-parallel pass: they are the piece, not the whole tensor to cut it from.
  partition::RankProgram prog;
  prog.set_rank(1);
  graph::Initializer& init = *prog.mutable_graph()->add_initializers();
  init.set_name("wte.weight");
  *init.mutable_type() = graph::tensor_type({4, 6}, DType::F32);
  init.set_trainable(true);
  const Tensor piece = whole("other", {4, 6}, 7);
  init.set_data(graph::tensor_bytes(piece));
  *prog.add_params() = shard("wte.weight", {8, 6}, 0, {{{4, 0}, {4, 6}}});
  const graph::Model m = runtime::stage_model(prog, 3);
  check_equal(graph::tensor_from_bytes(m.graph().initializers(0).data(), {4, 6}, DType::F32, "w"),
              piece);
}

TEST_CASE("the step breakdown takes the slowest rank and mean shares", "[engine]") {
  // total, compute, recompute, p2p wait, collectives
  const std::vector<runtime::StepTimes> ranks = {{1.0, 0.6, 0.1, 0.3, 0.1},
                                                 {0.8, 0.4, 0.0, 0.2, 0.2}};
  const runtime::StepBreakdown b = runtime::breakdown(ranks);
  CHECK(b.step == 1.0);
  CHECK(b.compute == Approx(0.5));
  CHECK(b.recompute == Approx(0.05));
  CHECK(b.p2p_wait == Approx(0.25));
  CHECK(b.collectives == Approx(0.15));
  CHECK(b.bubble == Approx(1 - 1.0 / 2.0));  // 1 s of compute in 2 rank-seconds
  CHECK(ranks[1].idle() == Approx(0.0));
}
